//! Go's pclntab: the runtime's own table of functions, names and per-PC values.
//!
//! This module owns decoding the table and its per-function SP-delta table (`pcsp`), the
//! same table the runtime uses to unwind and to size frames when it copies a stack. It
//! reads the layout of Go 1.18 and later, pinned to what Go 1.18 through 1.27 write:
//!
//! * magic `0xfffffff0`: Go 1.18 and 1.19;
//! * magic `0xfffffff1`: Go 1.20 and later (1.20 added `startLine` to `_func`, after the
//!   fields read here, so both decode the same way).
//!
//! Older magics (`0xfffffffb` for 1.2–1.15, `0xfffffffa` for 1.16–1.17) are recognised
//! only to say that they are unsupported. Only little-endian tables are read (amd64 and
//! arm64 are the supported architectures).
//!
//! Layout (all offsets relative to the table's first byte):
//!
//! ```text
//! header: magic u32, 0 u8, 0 u8, minLC u8 (PC quantum), ptrSize u8,
//!         nfunc, nfiles, textStart, funcnameOffset, cuOffset, filetabOffset,
//!         pctabOffset, pclnOffset                       (each ptrSize bytes)
//! functab at pclnOffset: nfunc+1 × {entryOff u32, funcOff u32}; the last entryOff is the
//!         end of the text; funcOff is relative to pclnOffset
//! _func at pclnOffset+funcOff: entryOff u32, nameOff i32, args i32, deferreturn u32,
//!         pcsp u32, pcfile u32, pcln u32, npcdata u32, cuOffset u32,
//!         [startLine i32, Go 1.20+], funcID u8, flag u8, _ u8, nfuncdata u8, ...
//!         (nameOff into funcnametab, pcsp into pctab; funcID marks generated wrappers)
//! ```
//!
//! Every read is bounds-checked: a truncated or corrupt table is a [`Problem`], never a
//! panic.

use crate::error::{ParseResult, Problem};

/// Magic of Go 1.18 and 1.19 tables.
pub const MAGIC_GO118: u32 = 0xffff_fff0;
/// Magic of Go 1.20 and later tables (through at least 1.27).
pub const MAGIC_GO120: u32 = 0xffff_fff1;
const MAGIC_GO116: u32 = 0xffff_fffa;
const MAGIC_GO12: u32 = 0xffff_fffb;

/// Size of the fixed part of the header before the word-sized fields.
const HEADER_FIXED: usize = 8;
/// Number of word-sized header fields.
const HEADER_WORDS: usize = 8;
/// Smallest `_func` record of Go 1.18 and 1.19 (nine u32 fields and four bytes); the first
/// five fields (entryOff, nameOff, args, deferreturn, pcsp) and `funcID` are read.
const FUNC_READ: usize = 40;
/// Smallest `_func` record of Go 1.20 and later, which added `startLine` before `funcID`.
const FUNC_READ_GO120: usize = 44;

/// The decoded header of a pclntab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The table's magic, [`MAGIC_GO118`] or [`MAGIC_GO120`].
    pub magic: u32,
    /// PC quantum (instruction size unit): 1 on amd64, 4 on arm64.
    pub quantum: u8,
    /// Pointer size in bytes.
    pub ptr_size: u8,
    /// Number of functions.
    pub nfunc: usize,
    /// Start of the text the function entries are relative to (0 in PIE files, where a
    /// relocation fills it in at load time).
    pub text_start: u64,
    funcname_off: usize,
    cu_off: usize,
    pctab_off: usize,
    pcln_off: usize,
}

impl Header {
    /// The Go versions whose linker writes this magic.
    pub fn go_versions(&self) -> &'static str {
        if self.magic == MAGIC_GO118 {
            "go1.18-1.19"
        } else {
            "go1.20+"
        }
    }
}

/// One function of the table with its frame facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Func {
    /// The function's name as the linker wrote it (`main.f`, `runtime.newstack`, ...).
    pub name: String,
    /// Entry PC as an offset from the text start.
    pub entry: u32,
    /// Length of the function's code in bytes.
    pub size: u32,
    /// Largest SP delta of the function's `pcsp` table: bytes the function pushes below
    /// the SP it was entered with (locals, outgoing arguments, saved frame pointer).
    pub max_sp: u32,
    /// The `_func` record's `funcID` byte: 0 for an ordinary function, else the runtime's
    /// code for a special one (one code marks generated wrappers, see `binary.rs`).
    pub func_id: u8,
}

/// A pclntab: the bytes plus its decoded header.
#[derive(Debug, Clone)]
pub struct Table<'a> {
    data: &'a [u8],
    /// The decoded header.
    pub header: Header,
}

fn u32_at(data: &[u8], off: usize) -> Option<u32> {
    let b = data.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn word_at(data: &[u8], off: usize, ptr_size: u8) -> Option<u64> {
    if ptr_size == 4 {
        return u32_at(data, off).map(u64::from);
    }
    let b = data.get(off..off.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Some(u64::from_le_bytes(a))
}

/// Reads an unsigned LEB128 varint of at most 32 bits; returns (value, bytes used).
fn uvarint32(data: &[u8]) -> Option<(u32, usize)> {
    let mut v: u32 = 0;
    for (i, &b) in data.iter().enumerate().take(5) {
        v |= u32::from(b & 0x7f).checked_shl(7 * i as u32)?;
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// Says whether `data` starts with a supported pclntab magic and plausible fixed header.
pub fn looks_like_header(data: &[u8]) -> bool {
    matches!(u32_at(data, 0), Some(MAGIC_GO118 | MAGIC_GO120))
        && data.len() >= HEADER_FIXED
        && data[4] == 0
        && data[5] == 0
        && matches!(data[6], 1 | 2 | 4)
        && matches!(data[7], 4 | 8)
}

impl<'a> Table<'a> {
    /// Decodes and checks the header of the table starting at `data[0]`. `data` may run
    /// past the end of the table (as when the table was found by scanning a file).
    pub fn parse(data: &'a [u8]) -> ParseResult<Table<'a>> {
        let magic = u32_at(data, 0)
            .ok_or_else(|| Problem::new("pclntab is truncated: shorter than its magic"))?;
        match magic {
            MAGIC_GO118 | MAGIC_GO120 => {}
            MAGIC_GO116 => return Err(Problem::new(
                "pclntab is from Go 1.16-1.17 (magic 0xfffffffa); Go 1.18 or later is supported",
            )),
            MAGIC_GO12 => {
                return Err(Problem::new(
                    "pclntab is from Go 1.2-1.15 (magic 0xfffffffb); Go 1.18 or later is supported",
                ))
            }
            other => {
                return Err(Problem::new(format!(
                    "pclntab has unknown magic {other:#010x} (expected 0xfffffff0 or 0xfffffff1)"
                )))
            }
        }
        if data.len() < HEADER_FIXED {
            return Err(Problem::new("pclntab is truncated inside its header"));
        }
        if data[4] != 0 || data[5] != 0 {
            return Err(Problem::new(
                "pclntab header is corrupt: padding bytes are not zero",
            ));
        }
        let quantum = data[6];
        let ptr_size = data[7];
        if !matches!(quantum, 1 | 2 | 4) {
            return Err(Problem::new(format!(
                "pclntab header is corrupt: PC quantum {quantum} (expected 1, 2 or 4)"
            )));
        }
        if !matches!(ptr_size, 4 | 8) {
            return Err(Problem::new(format!(
                "pclntab header is corrupt: pointer size {ptr_size} (expected 4 or 8)"
            )));
        }
        let mut words = [0u64; HEADER_WORDS];
        for (i, w) in words.iter_mut().enumerate() {
            *w = word_at(data, HEADER_FIXED + i * usize::from(ptr_size), ptr_size)
                .ok_or_else(|| Problem::new("pclntab is truncated inside its header"))?;
        }
        let header_len = HEADER_FIXED + HEADER_WORDS * usize::from(ptr_size);
        let [nfunc, _nfiles, text_start, funcname_off, cu_off, filetab_off, pctab_off, pcln_off] =
            words;
        let len = data.len() as u64;
        let ordered = header_len as u64 <= funcname_off
            && funcname_off <= cu_off
            && cu_off <= filetab_off
            && filetab_off <= pctab_off
            && pctab_off <= pcln_off;
        if !ordered {
            return Err(Problem::new(
                "pclntab header is corrupt: its sub-table offsets are out of order",
            ));
        }
        if pcln_off >= len {
            return Err(Problem::new(format!(
                "pclntab is truncated: function table at offset {pcln_off} but only {len} bytes"
            )));
        }
        let functab_len = nfunc
            .checked_add(1)
            .and_then(|n| n.checked_mul(8))
            .filter(|n| pcln_off.saturating_add(*n) <= len)
            .ok_or_else(|| {
                Problem::new(format!(
                    "pclntab is truncated: {nfunc} functions do not fit in {len} bytes"
                ))
            })?;
        let _ = functab_len;
        Ok(Table {
            data,
            header: Header {
                magic,
                quantum,
                ptr_size,
                nfunc: nfunc as usize,
                text_start,
                funcname_off: funcname_off as usize,
                cu_off: cu_off as usize,
                pctab_off: pctab_off as usize,
                pcln_off: pcln_off as usize,
            },
        })
    }

    /// Decodes every function: name, extent and largest SP delta.
    pub fn funcs(&self) -> ParseResult<Vec<Func>> {
        (0..self.header.nfunc).map(|i| self.func(i)).collect()
    }

    /// Decodes function `i` of the function table.
    pub fn func(&self, i: usize) -> ParseResult<Func> {
        let h = &self.header;
        let ft = h.pcln_off + i * 8;
        let corrupt =
            |what: &str| Problem::new(format!("pclntab is corrupt: function {i}: {what}"));
        let entry = u32_at(self.data, ft).ok_or_else(|| corrupt("function table truncated"))?;
        let func_off =
            u32_at(self.data, ft + 4).ok_or_else(|| corrupt("function table truncated"))?;
        let end = u32_at(self.data, ft + 8).ok_or_else(|| corrupt("function table truncated"))?;
        if end < entry {
            return Err(corrupt("entries are not in ascending order"));
        }
        let (record, id_at) = if h.magic == MAGIC_GO118 {
            (FUNC_READ, 36)
        } else {
            (FUNC_READ_GO120, 40)
        };
        let fo = h
            .pcln_off
            .checked_add(func_off as usize)
            .filter(|fo| fo.checked_add(record).is_some_and(|e| e <= self.data.len()))
            .ok_or_else(|| corrupt("its _func record lies outside the table"))?;
        let f_entry = u32_at(self.data, fo).unwrap_or(u32::MAX);
        if f_entry != entry {
            return Err(corrupt(
                "its _func record disagrees with the function table",
            ));
        }
        let name_off = u32_at(self.data, fo + 4).unwrap_or(u32::MAX) as usize;
        let pcsp = u32_at(self.data, fo + 16).unwrap_or(0) as usize;
        let name = self
            .name_at(name_off)
            .ok_or_else(|| corrupt("its name lies outside the name table"))?;
        let max_sp = if pcsp == 0 {
            0
        } else {
            let start = h
                .pctab_off
                .checked_add(pcsp)
                .filter(|s| *s < h.pcln_off)
                .ok_or_else(|| corrupt("its pcsp table lies outside the pc tables"))?;
            max_pc_value(&self.data[start..h.pcln_off], end - entry, h.quantum)
                .ok_or_else(|| corrupt("its pcsp table is malformed"))?
        };
        let func_id = self.data[fo + id_at];
        Ok(Func {
            name,
            entry,
            size: end - entry,
            max_sp,
            func_id,
        })
    }

    fn name_at(&self, off: usize) -> Option<String> {
        let start = self.header.funcname_off.checked_add(off)?;
        let region = self.data.get(start..self.header.cu_off)?;
        let nul = region.iter().position(|&b| b == 0)?;
        Some(String::from_utf8_lossy(&region[..nul]).into_owned())
    }
}

/// Largest value of a pc-value table covering `len` bytes of code, the way the runtime
/// steps it: pairs of (zig-zag value delta, PC delta × quantum) starting from value -1, a
/// zero value delta after the first pair ending the table. Negative values (the -1 start)
/// count as 0. `None` when the table runs off its bytes before covering the function.
pub fn max_pc_value(table: &[u8], len: u32, quantum: u8) -> Option<u32> {
    let mut p = table;
    let mut val: i32 = -1;
    let mut pc: u64 = 0;
    let mut max: i32 = 0;
    let mut first = true;
    while pc < u64::from(len) {
        let (uv, n) = uvarint32(p)?;
        if uv == 0 && !first {
            break;
        }
        first = false;
        p = p.get(n..)?;
        let delta = ((uv >> 1) as i32) ^ -((uv & 1) as i32);
        val = val.wrapping_add(delta);
        let (pcd, n) = uvarint32(p)?;
        p = p.get(n..)?;
        pc += u64::from(pcd) * u64::from(quantum);
        max = max.max(val);
    }
    Some(max.max(0) as u32)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a tiny synthetic Go 1.20 pclntab (64-bit, quantum `q`) for the given
    /// functions: (name, code length, pcsp table bytes).
    pub(crate) fn synth(q: u8, funcs: &[(&str, u32, Vec<u8>)]) -> Vec<u8> {
        let hdr = HEADER_FIXED + HEADER_WORDS * 8;
        let mut names = Vec::new();
        let mut name_offs = Vec::new();
        for (n, _, _) in funcs {
            name_offs.push(names.len() as u32);
            names.extend_from_slice(n.as_bytes());
            names.push(0);
        }
        let mut pctab = vec![0u8]; // offset 0 means "no table"
        let mut pcsp_offs = Vec::new();
        for (_, _, t) in funcs {
            pcsp_offs.push(if t.is_empty() { 0 } else { pctab.len() as u32 });
            pctab.extend_from_slice(t);
        }
        let funcname_off = hdr;
        let cu_off = funcname_off + names.len();
        let pctab_off = cu_off;
        let pcln_off = pctab_off + pctab.len();
        let nfunc = funcs.len();
        let mut functab = Vec::new();
        let mut recs = Vec::new();
        let mut entry = 0u32;
        let rec_base = (nfunc + 1) * 8;
        for (i, (_, len, _)) in funcs.iter().enumerate() {
            functab.extend_from_slice(&entry.to_le_bytes());
            functab.extend_from_slice(&((rec_base + recs.len()) as u32).to_le_bytes());
            let mut r = Vec::new();
            r.extend_from_slice(&entry.to_le_bytes());
            r.extend_from_slice(&name_offs[i].to_le_bytes());
            r.extend_from_slice(&0u32.to_le_bytes());
            r.extend_from_slice(&0u32.to_le_bytes());
            r.extend_from_slice(&pcsp_offs[i].to_le_bytes());
            r.extend_from_slice(&[0u8; 24]); // through funcID, flag, nfuncdata
            recs.extend_from_slice(&r);
            entry += len;
        }
        functab.extend_from_slice(&entry.to_le_bytes());
        functab.extend_from_slice(&0u32.to_le_bytes());
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC_GO120.to_le_bytes());
        out.extend_from_slice(&[0, 0, q, 8]);
        for w in [
            nfunc,
            0,
            0x40_1000,
            funcname_off,
            cu_off,
            cu_off,
            pctab_off,
            pcln_off,
        ] {
            out.extend_from_slice(&(w as u64).to_le_bytes());
        }
        out.extend_from_slice(&names);
        out.extend_from_slice(&pctab);
        out.extend_from_slice(&functab);
        out.extend_from_slice(&recs);
        out
    }

    /// Encodes a pc-value table from (value, pc length) runs, like the Go linker.
    pub(crate) fn pcvalue(runs: &[(i32, u32)], q: u8) -> Vec<u8> {
        fn put(out: &mut Vec<u8>, mut v: u32) {
            while v >= 0x80 {
                out.push((v as u8) | 0x80);
                v >>= 7;
            }
            out.push(v as u8);
        }
        let mut out = Vec::new();
        let mut prev = -1i32;
        for &(v, len) in runs {
            let d = v - prev;
            put(&mut out, ((d << 1) ^ (d >> 31)) as u32);
            put(&mut out, len / u32::from(q));
            prev = v;
        }
        out.push(0);
        out
    }

    #[test]
    fn decodes_synthetic_table() {
        let t = synth(
            1,
            &[
                (
                    "main.a",
                    40,
                    pcvalue(&[(0, 10), (8, 2), (0x208, 20), (0, 8)], 1),
                ),
                ("main.b", 16, pcvalue(&[(0, 16)], 1)),
                ("main.c", 8, Vec::new()),
            ],
        );
        let tab = Table::parse(&t).unwrap();
        assert_eq!(tab.header.nfunc, 3);
        assert_eq!(tab.header.go_versions(), "go1.20+");
        let f = tab.funcs().unwrap();
        assert_eq!(f[0].name, "main.a");
        assert_eq!(f[0].max_sp, 0x208);
        assert_eq!(f[0].size, 40);
        assert_eq!(f[1].max_sp, 0);
        assert_eq!(f[2].name, "main.c");
        assert_eq!(f[2].entry, 56);
    }

    #[test]
    fn go118_magic_decodes_the_same_way() {
        let mut t = synth(4, &[("main.a", 16, pcvalue(&[(0, 4), (64, 12)], 4))]);
        t[..4].copy_from_slice(&MAGIC_GO118.to_le_bytes());
        let tab = Table::parse(&t).unwrap();
        assert_eq!(tab.header.go_versions(), "go1.18-1.19");
        assert_eq!(tab.funcs().unwrap()[0].max_sp, 64);
    }

    #[test]
    fn quantum_scales_pc_deltas() {
        // With quantum 4, a run of 8 bytes is encoded as 2; the table must still end
        // exactly at the function's length.
        let t = pcvalue(&[(0, 4), (32, 8), (0, 4)], 4);
        assert_eq!(max_pc_value(&t, 16, 4), Some(32));
    }

    #[test]
    fn large_values_use_multibyte_varints() {
        let t = pcvalue(&[(0, 3), (0x1_2345, 300), (0, 1)], 1);
        assert_eq!(max_pc_value(&t, 304, 1), Some(0x1_2345));
    }

    #[test]
    fn rejects_old_and_unknown_magics() {
        let mut t = synth(1, &[("x", 1, Vec::new())]);
        t[..4].copy_from_slice(&MAGIC_GO116.to_le_bytes());
        assert!(Table::parse(&t)
            .unwrap_err()
            .message()
            .contains("1.16-1.17"));
        t[..4].copy_from_slice(&0x1234_5678u32.to_le_bytes());
        assert!(Table::parse(&t)
            .unwrap_err()
            .message()
            .contains("unknown magic"));
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let t = synth(
            1,
            &[
                ("main.a", 40, pcvalue(&[(0, 10), (8, 30)], 1)),
                ("main.b", 16, pcvalue(&[(0, 16)], 1)),
            ],
        );
        for n in 0..t.len() {
            let r = Table::parse(&t[..n]).and_then(|tab| tab.funcs());
            assert!(r.is_err(), "truncated to {n} bytes parsed");
        }
    }

    #[test]
    fn corrupt_bytes_never_panic() {
        let t = synth(1, &[("main.a", 40, pcvalue(&[(0, 10), (8, 30)], 1))]);
        for i in 0..t.len() {
            for v in [0u8, 0x7f, 0x80, 0xff] {
                let mut c = t.clone();
                c[i] = v;
                let _ = Table::parse(&c).and_then(|tab| tab.funcs());
            }
        }
    }
}
