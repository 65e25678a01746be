//! Shared helpers of the integration tests: fixtures, the Go toolchain, and reading frame
//! sizes out of `go tool objdump` prologues (the independent reference `frames` is checked
//! against).
#![allow(dead_code)]

use flate2::read::GzDecoder;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use weft_gostack::binary::{Arch, GoBinary};

/// The crate's testdata folder.
pub fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata")
}

/// Reads a file of testdata, gunzipping `*.gz`.
pub fn read_fixture(name: &str) -> Vec<u8> {
    let path = testdata().join(name);
    let raw = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if !name.ends_with(".gz") {
        return raw;
    }
    let mut out = Vec::new();
    GzDecoder::new(raw.as_slice())
        .read_to_end(&mut out)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    out
}

/// Writes `data` to a file under the test scratch folder (atomically, so parallel tests
/// may ask for the same one) and returns its path.
pub fn scratch_file(name: &str, data: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gostack-fixtures");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let tmp = dir.join(format!(
        "{name}.{}.{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::write(&tmp, data).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    path
}

/// A checked-in gzipped binary, decompressed to a scratch file.
pub fn fixture_binary(name: &str) -> PathBuf {
    scratch_file(name, &read_fixture(&format!("{name}.gz")))
}

/// The checked-in amd64 builds of the fixture service as files: plain, stripped
/// (`-s -w`), PIE, and the stripped and PIE ones with their section headers removed.
pub fn amd64_builds() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = [
        "service.amd64",
        "service.amd64.stripped",
        "service.amd64.pie",
    ]
    .iter()
    .map(|n| fixture_binary(n))
    .collect();
    for n in ["service.amd64.stripped", "service.amd64.pie"] {
        let bare = without_section_headers(&read_fixture(&format!("{n}.gz")));
        out.push(scratch_file(&format!("{n}.noshdr"), &bare));
    }
    out
}

/// Copy of an ELF64 file with its section headers removed (e_shoff, e_shnum and
/// e_shstrndx zeroed), as some strippers leave binaries.
pub fn without_section_headers(elf: &[u8]) -> Vec<u8> {
    assert_eq!(&elf[..5], b"\x7fELF\x02", "not ELF64");
    let mut out = elf.to_vec();
    out[0x28..0x30].fill(0);
    out[0x3c..0x40].fill(0);
    out
}

/// The Go toolchain: `$GOSTACK_GO` when set, else `.venv-go/bin/go` at the workspace
/// root, else `go` on PATH; of version 1.18 or later. `Err` says why there is none.
pub fn go_toolchain() -> Result<PathBuf, String> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv-go/bin/go");
    let candidates = match std::env::var_os("GOSTACK_GO") {
        Some(go) => vec![PathBuf::from(go)],
        None => vec![venv, PathBuf::from("go")],
    };
    let mut reasons = Vec::new();
    for cand in candidates {
        match Command::new(&cand).arg("version").output() {
            Ok(o) if o.status.success() => {
                let v = String::from_utf8_lossy(&o.stdout).to_string();
                let minor = v
                    .split_whitespace()
                    .nth(2)
                    .and_then(|s| s.strip_prefix("go1."))
                    .and_then(|s| s.split(['.', 'r', 'b']).next())
                    .and_then(|s| s.parse::<u32>().ok());
                match minor {
                    Some(m) if m >= 18 => return Ok(cand),
                    _ => reasons.push(format!(
                        "{}: {} is older than go1.18",
                        cand.display(),
                        v.trim()
                    )),
                }
            }
            Ok(o) => reasons.push(format!(
                "{}: `go version` failed: {}",
                cand.display(),
                o.status
            )),
            Err(e) => reasons.push(format!("{}: {e}", cand.display())),
        }
    }
    Err(format!(
        "no Go toolchain >= 1.18 (run scripts/install-go.sh): {}",
        reasons.join("; ")
    ))
}

/// Prints `<test>: skipped: <reason>` to the stderr handle itself, not through
/// `eprintln!`, so the test harness's output capture cannot hide it.
pub fn skip(test: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{test}: skipped: {reason}");
}

/// Returns the Go toolchain, or says the test is skipped and returns `None`.
pub fn go_or_skip(test: &str) -> Option<PathBuf> {
    go_toolchain().map_err(|reason| skip(test, &reason)).ok()
}

/// Builds the fixture service with `go build -trimpath -buildvcs=false <flags>` for
/// `goarch` into the scratch folder (no VCS stamp: the same source gives the same bytes
/// in any checkout).
pub fn go_build(go: &Path, out: &str, goarch: &str, flags: &[&str]) -> PathBuf {
    go_build_dir(go, &testdata().join("service"), out, goarch, flags)
}

/// Builds the Go program in `dir` (standard library only) like [`go_build`].
pub fn go_build_dir(go: &Path, dir: &Path, out: &str, goarch: &str, flags: &[&str]) -> PathBuf {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gostack-go");
    std::fs::create_dir_all(&scratch).unwrap();
    let path = scratch.join(out);
    let st = Command::new(go)
        .current_dir(dir)
        .env("GOTOOLCHAIN", "local")
        .env("GOPROXY", "off")
        .env("GOFLAGS", "")
        .env("CGO_ENABLED", "0")
        .env("GOOS", "linux")
        .env("GOARCH", goarch)
        .args(["build", "-trimpath", "-buildvcs=false"])
        .args(flags)
        .arg("-o")
        .arg(&path)
        .arg(".")
        .status()
        .expect("run go build");
    assert!(st.success(), "go build {out} failed");
    path
}

/// The Go toolchains to test with: the one of [`go_toolchain`] and every one listed in
/// `GOSTACK_EXTRA_GO` (colon-separated paths of `go` binaries), each with its `go version`.
pub fn go_toolchains(go: PathBuf) -> Vec<(PathBuf, String)> {
    let mut gos = vec![go];
    if let Ok(extra) = std::env::var("GOSTACK_EXTRA_GO") {
        gos.extend(extra.split(':').filter(|s| !s.is_empty()).map(Into::into));
    }
    gos.into_iter()
        .map(|go| {
            let out = Command::new(&go)
                .arg("version")
                .output()
                .expect("go version");
            let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
            (go, v)
        })
        .collect()
}

/// One function's prologue as `go tool objdump` shows it.
#[derive(Debug, Clone)]
pub struct Prologue {
    /// Function name.
    pub name: String,
    /// Source file of its first line; `.s` for assembly.
    pub file: String,
    /// Entry address (of its first instruction).
    pub addr: u64,
    /// Frame size the prologue allocates, counted the way `frames` counts (see
    /// [`prologue_frame`]).
    pub frame: u32,
}

fn imm(s: &str) -> Option<u32> {
    let s = s.trim().trim_start_matches('$');
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let v = match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).ok()?,
        None => s.parse().ok()?,
    };
    Some(if neg { v.wrapping_neg() } else { v })
}

/// The frame a prologue allocates, from its instructions (objdump's Go syntax):
///
/// * amd64: the return address (8) + 8 for each `PUSHQ` (the frame pointer `BP`, and in
///   assembly other registers or `PUSHFQ`; the most pushed at once, counting `POPQ`s) + n
///   of the first `SUBQ $n, SP` (or
///   `ADDQ $-n, SP`, which the assembler emits for n = 128);
/// * arm64: n of `MOVD.W R30, -n(RSP)` or `SUB $n, RSP, RSP`, or of `SUB $n, RSP, R20`
///   (plus `SUB $(a<<b), R20, R20` for big frames; `SUB R27, RSP, R20` after
///   `MOVD $n, R27` and `MOVK $(m<<16), R27`) once `MOVD R20, RSP` installs it.
///
/// Scanning stops at the first call, return or unconditional jump.
pub fn prologue_frame(arch: Arch, ins: &[String]) -> u32 {
    let stop = |i: &str| ["CALL ", "RET", "JMP "].iter().any(|p| i.starts_with(p));
    match arch {
        Arch::Amd64 => {
            // Running push depth (signed: an assembly function may pop its caller's
            // word first) and its largest value.
            let (mut depth, mut pushed) = (0i64, 0u32);
            for i in ins {
                if i.starts_with("PUSHQ ") || i == "PUSHFQ" {
                    depth += 8;
                    pushed = pushed.max(depth.max(0) as u32);
                } else if i.starts_with("POPQ ") || i == "POPFQ" {
                    depth -= 8;
                } else if let Some(n) = i
                    .strip_prefix("SUBQ ")
                    .or_else(|| i.strip_prefix("ADDQ $-"))
                    .and_then(|r| r.strip_suffix(", SP"))
                    .and_then(imm)
                {
                    return 8 + depth.max(0) as u32 + n;
                } else if stop(i) {
                    break;
                }
            }
            8 + pushed
        }
        Arch::Arm64 => {
            let mut r27 = None;
            let mut pending: Option<u32> = None;
            for i in ins {
                let n = |pre: &str, suf: &str| i.strip_prefix(pre)?.strip_suffix(suf).and_then(imm);
                if let Some(n) = n("MOVD.W R30, -", "(RSP)").or_else(|| n("SUB ", ", RSP, RSP")) {
                    return n;
                } else if let Some(v) = n("MOVD ", ", R27") {
                    r27 = Some(v);
                } else if let Some(v) = i
                    .strip_prefix("MOVK $(")
                    .and_then(|r| r.strip_suffix("<<16), R27"))
                    .and_then(|a| a.parse::<u32>().ok())
                {
                    r27 = r27.map(|r| r | v << 16);
                } else if i == "SUB R27, RSP, R20" {
                    pending = r27;
                } else if let Some(v) = n("SUB ", ", RSP, R20") {
                    pending = Some(v);
                } else if let Some(v) = i
                    .strip_prefix("SUB $(")
                    .and_then(|r| r.strip_suffix("), R20, R20"))
                    .and_then(|r| r.split_once("<<"))
                    .and_then(|(a, b)| Some(a.parse::<u32>().ok()? << b.parse::<u32>().ok()?))
                {
                    pending = pending.map(|p| p + v);
                } else if i == "MOVD R20, RSP" {
                    if let Some(n) = pending {
                        return n;
                    }
                } else if stop(i) {
                    break;
                }
            }
            0
        }
    }
}

/// Parses `go tool objdump` output (whole, or cut to each function's first lines).
pub fn parse_objdump(text: &str, arch: Arch) -> Vec<Prologue> {
    let mut out = Vec::new();
    type Cur = (String, String, u64, Vec<String>);
    let mut cur: Option<Cur> = None;
    let finish = |c: Option<Cur>, out: &mut Vec<Prologue>| {
        if let Some((name, file, addr, ins)) = c {
            let frame = prologue_frame(arch, &ins);
            out.push(Prologue {
                name,
                file,
                addr,
                frame,
            });
        }
    };
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("TEXT ") {
            finish(cur.take(), &mut out);
            let (name, file) = rest.split_once("(SB)").unwrap_or((rest, ""));
            cur = Some((name.to_string(), file.trim().to_string(), 0, Vec::new()));
        } else if let Some((_, _, addr, ins)) = cur.as_mut() {
            // "  file:line  0xaddr  hexbytes  INSTRUCTION operands"
            let toks: Vec<&str> = line.split_whitespace().collect();
            if toks.len() >= 4 && ins.len() < 12 {
                if ins.is_empty() {
                    *addr = toks[1]
                        .strip_prefix("0x")
                        .and_then(|h| u64::from_str_radix(h, 16).ok())
                        .unwrap_or(0);
                }
                ins.push(toks[3..].join(" "));
            }
        }
    }
    finish(cur.take(), &mut out);
    out
}

/// Result of checking `frames` against objdump.
#[derive(Debug, Default)]
pub struct Comparison {
    /// Functions in the pclntab.
    pub functions: usize,
    /// Of those, found in objdump (by entry address) and compared.
    pub compared: usize,
    /// Of those, equal frame sizes.
    pub matched: usize,
    /// Compiled Go functions that differ: (name, pclntab frame, objdump frame).
    pub go_mismatches: Vec<(String, u32, u32)>,
    /// Assembly functions that differ.
    pub asm_mismatches: Vec<(String, u32, u32)>,
    /// Assembly functions compared.
    pub asm_compared: usize,
}

/// Compares every function's pclntab frame with its objdump prologue, pairing them by
/// entry address (names repeat: ABI wrappers share their function's pclntab name).
pub fn compare(bin: &GoBinary, objdump: &str) -> Comparison {
    use std::collections::HashMap;
    let pro: HashMap<u64, Prologue> = parse_objdump(objdump, bin.arch)
        .into_iter()
        .map(|p| (p.addr, p))
        .collect();
    let mut c = Comparison {
        functions: bin.funcs.len(),
        ..Comparison::default()
    };
    for f in &bin.funcs {
        let Some(p) = pro.get(&(bin.text_start + u64::from(f.entry))) else {
            continue;
        };
        let asm = p.file.ends_with(".s");
        c.compared += 1;
        c.asm_compared += usize::from(asm);
        if f.frame == p.frame {
            c.matched += 1;
        } else if asm {
            c.asm_mismatches.push((p.name.clone(), f.frame, p.frame));
        } else {
            c.go_mismatches.push((p.name.clone(), f.frame, p.frame));
        }
    }
    c
}

/// Runs the CLI; returns (exit code, stdout, stderr).
pub fn cli(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_weft-gostack"))
        .args(args)
        .output()
        .expect("run weft-gostack");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Reads `key=value` from the fixture service's output.
pub fn service_value(out: &str, key: &str) -> u64 {
    out.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in service output:\n{out}"))
}
