//! Loading a Go executable: finding its pclntab, architecture, Go version and build ID.
//!
//! This module owns the step from "a file" to "every function with its frame size". It
//! reads ELF (and, through the `object` crate, Mach-O and PE) files. The pclntab is taken
//! from the `.gopclntab` section (non-PIE and, since Go 1.2x, PIE builds),
//! `.data.rel.ro.gopclntab` (PIE builds of older Go, e.g. 1.21) or `__gopclntab` (Mach-O);
//! when there is no such section (section headers stripped, or a format that keeps the
//! table inside another section) the file is scanned for the table's magic and every
//! candidate is decoded until one decodes whole.
//!
//! A function's frame size is its largest `pcsp` SP delta plus, on amd64, the return
//! address its caller's CALL pushed: the bytes one activation of it occupies on a
//! goroutine stack. On arm64 the link register is saved inside the frame the SP delta
//! already counts.

use crate::buildinfo::BuildInfo;
use crate::error::{ParseResult, Problem};
use crate::pclntab::{self, Table};
use object::{Architecture, Object, ObjectSection};
use serde::Serialize;

/// The architectures whose frames are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// x86-64: the CALL pushes an 8-byte return address below the caller's frame.
    Amd64,
    /// AArch64: the return address lives in the link register and is saved inside the
    /// callee's frame.
    Arm64,
}

impl Arch {
    /// Go's name for the architecture.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    /// Bytes a call pushes that the callee's `pcsp` does not count.
    pub fn return_address_size(self) -> u32 {
        match self {
            Arch::Amd64 => 8,
            Arch::Arm64 => 0,
        }
    }

    /// Bytes the runtime leaves free at the top of a new goroutine's stack before the
    /// first frame (`newproc1`: 4 words plus the minimum frame, rounded to the stack
    /// alignment).
    pub fn start_reserve(self) -> u32 {
        match self {
            Arch::Amd64 => 32,
            Arch::Arm64 => 48,
        }
    }

    fn pclntab_shape(self) -> (u8, u8) {
        match self {
            Arch::Amd64 => (1, 8),
            Arch::Arm64 => (4, 8),
        }
    }
}

/// One function of a Go binary with its frame size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FuncFrame {
    /// Function name as in the pclntab.
    pub name: String,
    /// Bytes one activation occupies on the stack: largest SP delta plus the return
    /// address on amd64.
    pub frame: u32,
    /// Largest SP delta of the function's `pcsp` table.
    pub sp_delta_max: u32,
    /// Code length in bytes (not printed: PIE code differs in length, not in frames).
    #[serde(skip)]
    pub code_size: u32,
    /// Entry as an offset from the text start.
    #[serde(skip)]
    pub entry: u32,
    /// The pclntab's `funcID` byte.
    #[serde(skip)]
    pub func_id: u8,
    /// Generated code by its `funcID`: an ABI wrapper (which carries the name of the
    /// function it wraps, so two rows share a name), a method wrapper, a hash or equality
    /// function, or assembly declared `WRAPPER`.
    #[serde(skip)]
    pub wrapper: bool,
}

/// A decoded Go executable.
#[derive(Debug, Clone)]
pub struct GoBinary {
    /// Architecture.
    pub arch: Arch,
    /// The Go version from `.go.buildinfo` (`go1.27.3`), when present.
    pub go_version: Option<String>,
    /// Versions that write this pclntab's magic (`go1.18-1.19` or `go1.20+`).
    pub pclntab_versions: &'static str,
    /// Where the table was found: `section .gopclntab` or `scan at file offset 0x…`.
    pub pclntab_location: String,
    /// GNU build ID (hex), when present; pprof records it for the main mapping.
    pub build_id: Option<String>,
    /// Address function entries are relative to: the pclntab's `textStart` when the file
    /// holds it, else the address of the `.text` (`__text`) section; 0 when neither is
    /// known (recent linkers leave `textStart` for the runtime to fill in).
    pub text_start: u64,
    /// Every function, in text order.
    pub funcs: Vec<FuncFrame>,
}

const PCLNTAB_SECTIONS: [&str; 3] = [".gopclntab", ".data.rel.ro.gopclntab", "__gopclntab"];

impl GoBinary {
    /// Decodes a Go executable held in memory.
    pub fn parse(data: &[u8]) -> ParseResult<GoBinary> {
        let file = object::File::parse(data).ok();
        let obj_arch = match &file {
            Some(f) => match f.architecture() {
                Architecture::X86_64 => Some(Arch::Amd64),
                Architecture::Aarch64 => Some(Arch::Arm64),
                other => {
                    return Err(Problem::new(format!(
                        "unsupported architecture {other:?}: amd64 and arm64 are supported"
                    )))
                }
            },
            None => None,
        };
        let section = match file.as_ref().and_then(|f| {
            PCLNTAB_SECTIONS
                .iter()
                .find_map(|n| Some((*n, f.section_by_name(n)?)))
        }) {
            Some((name, s)) => Some((
                name,
                s.data().map_err(|_| {
                    Problem::new(format!(
                        "pclntab is truncated: section {name} runs past the end of the file"
                    ))
                })?,
            )),
            None => None,
        };
        let (table, location, funcs) = match section {
            Some((name, bytes)) => {
                let t = Table::parse(bytes)?;
                let funcs = t.funcs()?;
                (t, format!("section {name}"), funcs)
            }
            None => scan_pclntab(data).map_err(|first| match first {
                Some(p) => p,
                None => Problem::new(if file.is_some() {
                    "not a Go binary: no .gopclntab section and no Go 1.18+ pclntab magic in the file"
                } else {
                    "not a Go binary: not an ELF, Mach-O or PE file and no Go 1.18+ pclntab magic in it"
                }),
            })?,
        };
        let h = &table.header;
        let arch = match obj_arch {
            Some(a) => a,
            None => match (h.quantum, h.ptr_size) {
                (1, 8) => Arch::Amd64,
                (4, 8) => Arch::Arm64,
                (q, p) => {
                    return Err(Problem::new(format!(
                        "unsupported pclntab shape (PC quantum {q}, pointer size {p}): amd64 and arm64 are supported"
                    )))
                }
            },
        };
        if arch.pclntab_shape() != (h.quantum, h.ptr_size) {
            return Err(Problem::new(format!(
                "pclntab is corrupt: PC quantum {} and pointer size {} do not fit {}",
                h.quantum,
                h.ptr_size,
                arch.name()
            )));
        }
        if funcs.is_empty() {
            return Err(Problem::new("pclntab lists no functions"));
        }
        let ra = arch.return_address_size();
        let wrapper_id = wrapper_func_id(&funcs);
        let funcs = funcs
            .into_iter()
            .map(|f| FuncFrame {
                frame: f.max_sp.saturating_add(ra),
                sp_delta_max: f.max_sp,
                code_size: f.size,
                entry: f.entry,
                func_id: f.func_id,
                wrapper: wrapper_id.is_some_and(|id| f.func_id == id),
                name: f.name,
            })
            .collect();
        let build_id = file
            .as_ref()
            .and_then(|f| f.build_id().ok().flatten())
            .map(hex);
        let buildinfo = BuildInfo::of_executable(data, file.as_ref());
        Ok(GoBinary {
            arch,
            go_version: buildinfo.map(|b| b.version),
            pclntab_versions: table.header.go_versions(),
            pclntab_location: location,
            build_id,
            text_start: match table.header.text_start {
                0 => file
                    .as_ref()
                    .and_then(|f| {
                        f.section_by_name(".text")
                            .or_else(|| f.section_by_name("__text"))
                    })
                    .map_or(0, |s| s.address()),
                t => t,
            },
            funcs,
        })
    }

    /// The Go version to show: from build info, else the pclntab's version range.
    pub fn version_label(&self) -> String {
        self.go_version
            .clone()
            .unwrap_or_else(|| self.pclntab_versions.to_string())
    }
}

/// The `funcID` the linker gives generated wrappers. Its number moves between Go releases
/// (21 in 1.18–1.22, 23 in 1.27) as special functions are added, but it always directly
/// follows `runtime.systemstack_switch`'s; a table without that function (not a whole Go
/// program) uses the largest `funcID` present, the wrapper code being the last one.
fn wrapper_func_id(funcs: &[pclntab::Func]) -> Option<u8> {
    let anchor = funcs
        .iter()
        .find(|f| f.name == "runtime.systemstack_switch" && f.func_id != 0);
    match anchor {
        Some(f) => f.func_id.checked_add(1),
        None => funcs.iter().map(|f| f.func_id).max().filter(|&id| id != 0),
    }
}

/// Reads and decodes the Go executable at `path`.
pub fn load(path: &std::path::Path) -> Result<GoBinary, crate::Error> {
    let data = std::fs::read(path).map_err(|e| crate::Error::new(path.display(), e.to_string()))?;
    GoBinary::parse(&data).map_err(|p| p.in_file(path.display()))
}

type Scanned<'a> = (Table<'a>, String, Vec<pclntab::Func>);

/// Finds the pclntab by its magic: the first candidate whose whole table decodes. When
/// none does, the error is what was wrong with the first candidate that had a plausible
/// header (`None` when there was none).
fn scan_pclntab(data: &[u8]) -> Result<Scanned<'_>, Option<Problem>> {
    let mut first_problem = None;
    let mut at = 0;
    while let Some(off) = data.get(at..).and_then(find_magic).map(|o| o + at) {
        let cand = &data[off..];
        if pclntab::looks_like_header(cand) {
            match Table::parse(cand).and_then(|t| Ok((t.funcs()?, t))) {
                Ok((funcs, t)) if !funcs.is_empty() => {
                    return Ok((t, format!("scan at file offset {off:#x}"), funcs))
                }
                Ok(_) => {}
                Err(p) => {
                    first_problem.get_or_insert_with(|| {
                        Problem::new(format!(
                            "{} (table found by scanning, at file offset {off:#x})",
                            p.message()
                        ))
                    });
                }
            }
        }
        at = off + 1;
    }
    Err(first_problem)
}

fn find_magic(d: &[u8]) -> Option<usize> {
    // Both magics share the bytes f? ff ff ff 00 00 (little-endian).
    d.windows(6).position(|w| {
        (w[0] == 0xf0 || w[0] == 0xf1)
            && w[1] == 0xff
            && w[2] == 0xff
            && w[3] == 0xff
            && w[4] == 0
            && w[5] == 0
    })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pclntab::tests::{pcvalue, synth};

    #[test]
    fn finds_table_by_scanning_raw_bytes() {
        let mut data = b"some leading junk \xf1\xff\xff\xff\x00\x00 not a table".to_vec();
        data.extend(synth(
            1,
            &[("main.main", 32, pcvalue(&[(0, 4), (24, 28)], 1))],
        ));
        let b = GoBinary::parse(&data).unwrap();
        assert_eq!(b.arch, Arch::Amd64);
        assert!(b.pclntab_location.starts_with("scan at file offset"));
        assert_eq!(b.funcs[0].frame, 32);
        assert_eq!(b.funcs[0].sp_delta_max, 24);
    }

    #[test]
    fn arm64_shape_adds_no_return_address() {
        let data = synth(4, &[("main.main", 32, pcvalue(&[(0, 4), (48, 28)], 4))]);
        let b = GoBinary::parse(&data).unwrap();
        assert_eq!(b.arch, Arch::Arm64);
        assert_eq!(b.funcs[0].frame, 48);
    }

    #[test]
    fn non_go_input_says_so() {
        let e = GoBinary::parse(b"#!/bin/sh\necho hello\n").unwrap_err();
        assert!(e.message().starts_with("not a Go binary"), "{e}");
    }
}
