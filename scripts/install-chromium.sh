#!/bin/sh
# Installs Debian's headless-capable Chromium for weft's browser test
# (weft/tests/debug_page_browser.rs), which skips with a printed reason where it is missing.
# Usage: sudo scripts/install-chromium.sh   (CI runs as root)
set -eu
if command -v chromium >/dev/null 2>&1; then
    echo "chromium: already installed: $(chromium --version 2>/dev/null || true)"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
chromium --version
