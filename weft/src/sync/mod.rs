//! Task-parking locks and barriers: Go's `sync` package.
