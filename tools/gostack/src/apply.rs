//! Applying a starting stack size to a Go executable, and reading it back.
//!
//! Owns the step from "a linux Go executable" to "a copy whose goroutines start with the
//! recommended stack". Go's runtime keeps the size new goroutines get from the free list in
//! `var startingStackSize uint32 = fixedStack` (`runtime/stack.go`): constant-initialised,
//! so its initial value lies in the file (`.noptrdata`). [`inspect`] finds it, in this
//! order:
//!
//! 1. the pclntab names `runtime.gcComputeStartingStackSize` (also in stripped builds);
//! 2. its code holds one store of `fixedStack` to the variable ([`crate::codescan`]), which
//!    gives the address (PIE or not: the store is PC-relative);
//! 3. a `.symtab` entry `runtime.startingStackSize`, when the file has one, must name the
//!    same address;
//! 4. the address maps through the program headers to file bytes of a writable `PT_LOAD`
//!    segment (`.noptrdata` when section headers say), which no dynamic relocation
//!    rewrites.
//!
//! [`apply`] then writes the new size there and, on request, a `RET` over the function's
//! first instruction, so the GC no longer recomputes the size (see [`apply`] for why that is
//! safe).
//!
//! Invariants:
//! 1. Nothing is written unless every check holds: the file is a linux ELF executable
//!    (`-buildmode` exe or pie) for amd64 or arm64 built by a Go release in [`KNOWN_GO`]
//!    without GOEXPERIMENTs; the function and the store are found exactly once; symbol
//!    and code agree; the variable holds `fixedStack`; the size is a power of two in
//!    [`FIXED_STACK`]..=[`MAX_SIZE`]. Each failure is a [`Problem`] that says which.
//! 2. [`apply`] returns new bytes and never touches its input; [`write_new`] refuses an
//!    output that is the input file under any name (same device and inode: symlinks and
//!    hard links included) and replaces the output by renaming a finished temporary file.
//! 3. [`apply`] re-reads its own result with [`inspect`] and fails unless it reads back the
//!    size and neutralisation it wrote.
//!
//! May call: `binary`, `buildinfo`, `codescan`, `object`. Called by: `main`, the tests,
//! `weft-bench growth`.
//!
//! Why patch the file: Go 1.27 has no public knob for the starting stack (golang/go#18138,
//! #61052); a team that cannot rebuild with a patched runtime can still ship a copy of its
//! binary with one word changed. The build-time alternative (a `//go:linkname` to the
//! variable plus `-X runtime.godebugDefault`) is printed by `apply --print-build-flags`.

use crate::binary::{Arch, FuncFrame, GoBinary};
use crate::buildinfo::BuildInfo;
use crate::codescan;
use crate::error::{ParseResult, Problem};
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SegmentFlags};
use serde::Serialize;
use std::path::Path;

pub use crate::codescan::FIXED_STACK;

/// Largest size `apply` writes: 1 GiB (the runtime's `maxstacksize` on 64-bit is 10⁹ bytes,
/// which a goroutine could not start above anyway).
pub const MAX_SIZE: u64 = 1 << 30;
/// The function whose code stores the variable.
pub const FUNC: &str = "runtime.gcComputeStartingStackSize";
/// The variable.
pub const VAR: &str = "runtime.startingStackSize";

/// Go releases (`go1.N` lines, every patch release of each) whose runtime `apply` was
/// checked against: the variable and the function are as described above, the fixture
/// service and `bench/go/growth` built plain, stripped and PIE for amd64 and arm64 are
/// found, patched and read back, and the amd64 builds run with the applied size. To add a
/// release, see "Adding a Go release" in the crate's README.
pub const KNOWN_GO: &[&str] = &[
    "go1.21", "go1.22", "go1.23", "go1.24", "go1.25", "go1.26", "go1.27",
];

/// How the variable's address was established.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Found {
    /// From the code, and the `.symtab` symbol agrees.
    SymbolAndCode,
    /// From the code alone (no `.symtab`: a stripped build).
    Code,
}

/// What [`inspect`] read from an executable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Inspection {
    /// Architecture.
    pub arch: Arch,
    /// Go version from the build info.
    pub go_version: String,
    /// The build info's `DefaultGODEBUG` setting (empty when it has none).
    pub default_godebug: String,
    /// `runtime.startingStackSize`'s address.
    pub var_address: u64,
    /// Its offset in the file.
    pub var_offset: u64,
    /// The section holding it, when the file has section headers.
    pub var_section: Option<String>,
    /// How the address was established.
    pub found: Found,
    /// The variable's value in the file: the size goroutines start with (until the first GC,
    /// unless the recomputation is off).
    pub size: u32,
    /// `runtime.gcComputeStartingStackSize`'s entry address.
    pub func_address: u64,
    /// Its offset in the file.
    pub func_offset: u64,
    /// Its code's length in bytes.
    pub func_size: u32,
    /// Length of its first instruction.
    pub func_entry_len: usize,
    /// Stores to the variable in its code.
    pub stores: usize,
    /// It returns at its entry: the recomputation at each GC is neutralised.
    pub neutralised: bool,
}

/// Reads where an executable keeps its starting stack size and what it holds, checking
/// steps 1–4 of the module doc and the file-level checks of invariant 1 (the Go version
/// apart: see [`check_version`]).
pub fn inspect(data: &[u8]) -> ParseResult<Inspection> {
    let file = object::File::parse(data).map_err(|_| {
        Problem::new("not an ELF executable: apply patches linux ELF Go executables")
    })?;
    if file.format() != object::BinaryFormat::Elf {
        return Err(Problem::new(format!(
            "a {:?} file: apply patches linux ELF Go executables only",
            file.format()
        )));
    }
    let b = GoBinary::parse(data)?;
    let info = BuildInfo::of_executable(data, Some(&file)).ok_or_else(|| {
        Problem::new("no Go build info (.go.buildinfo): cannot tell the Go version")
    })?;
    check_build(&info, b.arch)?;

    let func = the_function(&b)?;
    let text_start = text_start(&b, &file)?;
    let func_address = text_start
        .checked_add(u64::from(func.entry))
        .ok_or_else(|| Problem::new(format!("{FUNC}: its address overflows")))?;
    let (func_offset, code) =
        file_bytes(&file, data, func_address, func.code_size.into(), Need::Code)
            .map_err(|p| Problem::new(format!("{FUNC}: {}", p.message())))?;
    let site = codescan::find_starting_stack(b.arch, code, func_address)
        .map_err(|p| Problem::new(format!("{FUNC}: {}", p.message())))?;

    let found = match file.symbol_by_name(VAR) {
        Some(sym) if sym.address() != site.address => {
            return Err(Problem::new(format!(
                "symbol {VAR} is at {:#x} but {FUNC} stores to {:#x}: not sure which to patch",
                sym.address(),
                site.address
            )))
        }
        Some(sym) if sym.size() != 0 && sym.size() != 4 => {
            return Err(Problem::new(format!(
                "symbol {VAR} is {} bytes, not a uint32",
                sym.size()
            )))
        }
        Some(_) => Found::SymbolAndCode,
        None => Found::Code,
    };
    let (var_offset, var_bytes) = file_bytes(&file, data, site.address, 4, Need::Data)
        .map_err(|p| Problem::new(format!("{VAR} at {:#x}: {}", site.address, p.message())))?;
    let var_section = section_of(&file, site.address);
    match &var_section {
        Some(s) if s != ".noptrdata" => {
            return Err(Problem::new(format!(
                "{VAR} at {:#x} is in {s}, not .noptrdata: code shape not recognised",
                site.address
            )))
        }
        None if file.sections().any(|s| s.address() != 0) => {
            return Err(Problem::new(format!(
                "{VAR} at {:#x} is in no section although the file has section headers",
                site.address
            )))
        }
        _ => {}
    }
    if let Some(relocs) = file.dynamic_relocations() {
        for (at, _) in relocs {
            if at < site.address.saturating_add(4) && site.address < at.saturating_add(8) {
                return Err(Problem::new(format!(
                    "a dynamic relocation at {at:#x} rewrites {VAR} at load time"
                )));
            }
        }
    }
    let size = u32::from_le_bytes(var_bytes.try_into().expect("file_bytes gives 4 bytes"));
    Ok(Inspection {
        arch: b.arch,
        go_version: info.version.clone(),
        default_godebug: info.setting("DefaultGODEBUG").unwrap_or("").to_string(),
        var_address: site.address,
        var_offset,
        var_section,
        found,
        size,
        func_address,
        func_offset,
        func_size: func.code_size,
        func_entry_len: site.entry_len,
        stores: site.stores,
        neutralised: site.returns_at_entry,
    })
}

/// Refuses a Go version `apply` was not checked against ([`KNOWN_GO`]): another release
/// line, a pre-release, a development build, or a GOEXPERIMENT build.
pub fn check_version(version: &str) -> ParseResult<()> {
    let refuse = |why: &str| {
        Err(Problem::new(format!(
            "built by {version}, {why}; apply knows {} (see \"Adding a Go release\" in \
             weft-gostack's README)",
            KNOWN_GO.join(", ")
        )))
    };
    if let Some((_, exp)) = version.split_once(' ') {
        return refuse(&format!(
            "with GOEXPERIMENT ({exp}), which apply has not checked"
        ));
    }
    let Some(rest) = version.strip_prefix("go1.") else {
        return refuse("not a Go release");
    };
    let minor: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let after = &rest[minor.len()..];
    let release = after.is_empty()
        || after
            .strip_prefix('.')
            .is_some_and(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
    if !release {
        return refuse("a pre-release");
    }
    if !KNOWN_GO.contains(&format!("go1.{minor}").as_str()) {
        return refuse("a release apply has not been checked against");
    }
    Ok(())
}

/// Refuses a size the runtime could not start goroutines with: not a power of two, below
/// `fixedStack` or above [`MAX_SIZE`].
pub fn check_size(size: u64) -> ParseResult<()> {
    if !size.is_power_of_two() {
        return Err(Problem::new(format!(
            "size {size} is not a power of two (the runtime allocates stacks in powers of two: \
             2048, 4096, 8192, …)"
        )));
    }
    if size < u64::from(FIXED_STACK) {
        return Err(Problem::new(format!(
            "size {size} is below fixedStack ({FIXED_STACK}), the smallest stack the runtime allocates"
        )));
    }
    if size > MAX_SIZE {
        return Err(Problem::new(format!(
            "size {size} is above 1 GiB ({MAX_SIZE}), more than a goroutine may ever use"
        )));
    }
    Ok(())
}

/// Parses a size: a number of bytes with an optional binary suffix (`32768`, `32KiB`,
/// `32K`, `1MiB`, `1M`, `1GiB`).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.chars().take_while(char::is_ascii_digit).count();
    let (num, suffix) = t.split_at(digits);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("size {s:?} is not a number of bytes (32768, 32KiB, 1MiB)"))?;
    let shift = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        _ => {
            return Err(format!(
                "size {s:?} has an unknown unit (use B, KiB, MiB or GiB: 1 KiB = 1024 B)"
            ))
        }
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

/// What [`apply`] changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The input as [`inspect`] read it.
    pub before: Inspection,
    /// The output as [`inspect`] reads it back.
    pub after: Inspection,
    /// The new file's bytes.
    pub bytes: Vec<u8>,
}

/// Returns a copy of `data` whose `runtime.startingStackSize` starts at `size` and, with
/// `neutralise`, whose `runtime.gcComputeStartingStackSize` returns at once.
///
/// Why a `RET` over the first instruction is safe: the function takes no arguments and
/// returns no results; at its entry it has pushed, reserved and saved nothing (any prologue
/// comes after the entry), so returning there leaves SP, the frame pointer and the return
/// address as the caller (`gcMarkTermination`) made them; Go's internal ABI has no
/// callee-saved registers besides the fixed ones (g in R14/R28, the zero X15) that a `RET`
/// leaves alone; and on arm64 the return address is in the link register at entry, where
/// `RET` reads it. The unwinder sees SP delta 0 at the entry PC, true for the `RET` too.
/// What the skipped body did: rewrite the variable from the average scanned stack, which
/// `GODEBUG=adaptivestackstart=0` skips the same way (it is the function's first test), and
/// reset two per-P counters (`scannedStacks`, `scannedStackSize`) that nothing else reads;
/// they keep counting, 64-bit, never near overflow. The `/gc/stack/starting-size:bytes`
/// metric then stays at the applied size.
pub fn apply(data: &[u8], size: u64, neutralise: bool) -> ParseResult<Applied> {
    let before = inspect(data)?;
    check_version(&before.go_version)?;
    if before.size != FIXED_STACK {
        return Err(Problem::new(format!(
            "{VAR} is {} in the file, not {FIXED_STACK} (fixedStack): already applied? apply \
             to the original build",
            before.size
        )));
    }
    if before.neutralised {
        return Err(Problem::new(format!(
            "{FUNC} already returns at its entry: not an original build"
        )));
    }
    check_size(size)?;
    let mut bytes = data.to_vec();
    let at = before.var_offset as usize;
    bytes[at..at + 4].copy_from_slice(&(size as u32).to_le_bytes());
    if neutralise {
        let patch = codescan::return_at_entry(before.arch, before.func_entry_len);
        let at = before.func_offset as usize;
        bytes[at..at + patch.len()].copy_from_slice(&patch);
    }
    let after = inspect(&bytes).map_err(|p| {
        Problem::new(format!(
            "the patched copy does not read back: {}",
            p.message()
        ))
    })?;
    if u64::from(after.size) != size || after.neutralised != neutralise {
        return Err(Problem::new(format!(
            "the patched copy reads back size {} (neutralised: {}), not what was written",
            after.size, after.neutralised
        )));
    }
    Ok(Applied {
        before,
        after,
        bytes,
    })
}

/// Refuses an `output` that is `input` under any name: the same path, a symbolic link to
/// it, or a hard link (same device and inode) (invariant 2).
pub fn check_output(input: &Path, output: &Path) -> Result<(), crate::Error> {
    use std::os::unix::fs::MetadataExt;
    let meta_in =
        std::fs::metadata(input).map_err(|e| crate::Error::new(input.display(), e.to_string()))?;
    match std::fs::metadata(output) {
        Ok(m) if m.dev() == meta_in.dev() && m.ino() == meta_in.ino() => Err(crate::Error::new(
            output.display(),
            format!(
                "is the input {} (the same file under another name or link): apply writes a \
                 new file, never in place",
                input.display()
            ),
        )),
        _ => Ok(()),
    }
}

/// Writes `bytes` as a new file at `output` with `input`'s permissions: checks
/// [`check_output`], writes a temporary file beside `output`, and renames it into place.
pub fn write_new(input: &Path, output: &Path, bytes: &[u8]) -> Result<(), crate::Error> {
    use std::io::Write;
    check_output(input, output)?;
    let perms = std::fs::metadata(input)
        .map_err(|e| crate::Error::new(input.display(), e.to_string()))?
        .permissions();
    let name = output
        .file_name()
        .ok_or_else(|| crate::Error::new(output.display(), "has no file name"))?;
    let dir = match output.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let tmp = dir.join(format!(
        ".{}.gostack-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.set_permissions(perms)?;
        f.sync_all()?;
        std::fs::rename(&tmp, output)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(crate::Error::new(output.display(), e.to_string()));
    }
    Ok(())
}

/// The one non-wrapper function named [`FUNC`].
fn the_function(b: &GoBinary) -> ParseResult<&FuncFrame> {
    let all: Vec<&FuncFrame> = b.funcs.iter().filter(|f| f.name == FUNC).collect();
    let real: Vec<&FuncFrame> = all.iter().copied().filter(|f| !f.wrapper).collect();
    match real.as_slice() {
        [one] => Ok(one),
        [] => Err(Problem::new(format!(
            "the pclntab has no {FUNC} (inlined, renamed, or a runtime without adaptive \
             starting stacks): nothing to patch"
        ))),
        many => Err(Problem::new(format!(
            "the pclntab has {} functions named {FUNC}: not sure which to patch",
            many.len()
        ))),
    }
}

/// Where function entries are relative to: the pclntab's or `.text`'s start, checked
/// against the ELF entry point (`_rt0_<arch>_linux`), which alone gives it when the file
/// has neither.
fn text_start(b: &GoBinary, file: &object::File<'_>) -> ParseResult<u64> {
    let rt0 = format!("_rt0_{}_linux", b.arch.name());
    let from_entry = b
        .funcs
        .iter()
        .find(|f| f.name == rt0)
        .and_then(|f| file.entry().checked_sub(u64::from(f.entry)));
    match (b.text_start, from_entry) {
        (0, Some(t)) => Ok(t),
        (0, None) => Err(Problem::new(format!(
            "cannot place the code: no .text section, no text start in the pclntab, and the \
             entry point is not {rt0}"
        ))),
        (t, Some(e)) if t != e => Err(Problem::new(format!(
            "the text starts at {t:#x} by the file but at {e:#x} by the entry point: not sure \
             where the code is"
        ))),
        (t, _) => Ok(t),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Need {
    Code,
    Data,
}

/// The file offset and bytes of `len` bytes at `address`, inside the file-backed part of
/// one `PT_LOAD` segment that is executable (`Need::Code`) or writable (`Need::Data`).
fn file_bytes<'d>(
    file: &object::File<'_>,
    data: &'d [u8],
    address: u64,
    len: u64,
    need: Need,
) -> ParseResult<(u64, &'d [u8])> {
    const PF_X: u32 = 1;
    const PF_W: u32 = 2;
    let end = address
        .checked_add(len)
        .ok_or_else(|| Problem::new("address range overflows"))?;
    for seg in file.segments() {
        let (off, filesz) = seg.file_range();
        let start = seg.address();
        if address < start || end > start.saturating_add(filesz) {
            continue;
        }
        let flags = match seg.flags() {
            SegmentFlags::Elf { p_flags } => p_flags,
            _ => 0,
        };
        let wanted = match need {
            Need::Code => PF_X,
            Need::Data => PF_W,
        };
        if flags & wanted == 0 {
            return Err(Problem::new(format!(
                "its segment at {start:#x} is not {}",
                if need == Need::Code {
                    "executable"
                } else {
                    "writable"
                }
            )));
        }
        let at = off.saturating_add(address - start);
        let bytes = usize::try_from(at)
            .ok()
            .zip(usize::try_from(len).ok())
            .and_then(|(at, len)| data.get(at..at.checked_add(len)?))
            .ok_or_else(|| Problem::new("its segment runs past the end of the file"))?;
        return Ok((at, bytes));
    }
    Err(Problem::new(format!(
        "no loadable segment holds its {len} bytes in the file (beyond the file's data, or no program headers)"
    )))
}

/// The name of the allocated section holding `address`, when the file has section headers.
fn section_of(file: &object::File<'_>, address: u64) -> Option<String> {
    file.sections()
        .filter(|s| s.address() != 0 && s.size() != 0)
        .find(|s| s.address() <= address && address < s.address() + s.size())
        .and_then(|s| s.name().ok().map(str::to_string))
}

/// Refuses build info that is not a linux executable for `arch`, or a GOEXPERIMENT build.
fn check_build(info: &BuildInfo, arch: Arch) -> ParseResult<()> {
    match info.setting("GOOS") {
        Some("linux") => {}
        Some(os) => {
            return Err(Problem::new(format!(
                "built for GOOS={os}: apply patches linux executables only"
            )))
        }
        None => return Err(Problem::new("the build info has no GOOS setting")),
    }
    match info.setting("GOARCH") {
        Some(a) if a == arch.name() => {}
        other => {
            return Err(Problem::new(format!(
                "the build info says GOARCH={} but the file is {}",
                other.unwrap_or("(none)"),
                arch.name()
            )))
        }
    }
    match info.setting("-buildmode") {
        Some("exe" | "pie") | None => Ok(()),
        Some(m) => Err(Problem::new(format!(
            "built with -buildmode={m}: apply patches executables (exe, pie) only"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("32768"), Ok(32768));
        assert_eq!(parse_size("32KiB"), Ok(32768));
        assert_eq!(parse_size("32k"), Ok(32768));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("1 GiB"), Ok(1 << 30));
        assert!(parse_size("32KB").is_err());
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
    }

    #[test]
    fn sizes_must_be_powers_of_two_in_range() {
        assert!(check_size(2048).is_ok());
        assert!(check_size(32768).is_ok());
        assert!(check_size(1 << 30).is_ok());
        let e = check_size(30000).unwrap_err();
        assert!(e.message().contains("not a power of two"), "{e}");
        assert!(check_size(1024)
            .unwrap_err()
            .message()
            .contains("below fixedStack"));
        assert!(check_size(1 << 31)
            .unwrap_err()
            .message()
            .contains("above 1 GiB"));
        assert!(check_size(0).is_err());
    }

    #[test]
    fn versions_are_pinned_to_checked_releases() {
        assert!(check_version("go1.27.3").is_ok());
        assert!(check_version("go1.21.13").is_ok());
        assert!(check_version("go1.27.0").is_ok());
        for v in [
            "go1.20.14",
            "go1.28.0",
            "go1.27rc1",
            "go1.27.3 X:nosynchashtriggerbuffer",
            "devel go1.28-abcdef",
            "go1.27.",
            "go2.0",
        ] {
            let e = check_version(v).unwrap_err();
            assert!(e.message().starts_with(&format!("built by {v}")), "{e}");
        }
    }
}
