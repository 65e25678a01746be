//! The fuzz targets' property run on stable Rust: thousands of randomly mutated and
//! truncated inputs to the parsers (and the analysis behind them), the code-pattern scanner
//! and `apply`'s inspection must give an answer or an error, never a panic. cargo-fuzz (fuzz/) runs the same entry points under libFuzzer
//! where a nightly toolchain is available.

mod common;

use common::*;
use flate2::read::GzDecoder;
use std::io::Read;
use weft_gostack::analyze::{analyze, Options};
use weft_gostack::apply;
use weft_gostack::binary::GoBinary;
use weft_gostack::codescan;
use weft_gostack::pclntab::Table;
use weft_gostack::pprof::Profile;

/// xorshift64*: a fixed-seed generator so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// Overwrites 1-8 bytes (or, one time in eight, truncates) somewhere in `data[..span]`.
    fn mutate(&mut self, data: &mut Vec<u8>, span: usize) {
        if self.below(8) == 0 {
            let n = self.below(span);
            data.truncate(n);
            return;
        }
        for _ in 0..1 + self.below(8) {
            let i = self.below(span.min(data.len()));
            let v = match self.below(4) {
                0 => 0,
                1 => 0xff,
                2 => 0x80,
                _ => self.next() as u8,
            };
            if let Some(b) = data.get_mut(i) {
                *b = v;
            }
        }
    }

    /// Overwrites 1-8 bytes of `data[lo..hi]` (never truncates).
    fn poke(&mut self, data: &mut [u8], lo: usize, hi: usize) {
        for _ in 0..1 + self.below(8) {
            let i = lo + self.below(hi - lo);
            let v = match self.below(4) {
                0 => 0,
                1 => 0xff,
                2 => self.next() as u8 & 0x1f, // register numbers, small offsets
                _ => self.next() as u8,
            };
            data[i] = v;
        }
    }
}

#[test]
fn mutated_pclntabs_never_panic() {
    let elf = read_fixture("service.amd64.stripped.gz");
    let off = elf
        .windows(6)
        .position(|w| w == b"\xf1\xff\xff\xff\x00\x00")
        .unwrap();
    let table = &elf[off..];
    let pcln = u64::from_le_bytes(table[64..72].try_into().unwrap()) as usize;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut ok, mut err) = (0, 0);
    for round in 0..400 {
        let mut t = table.to_vec();
        // Half the rounds hit the header and function table, the rest anywhere.
        let span = if round % 2 == 0 {
            pcln + 20_000
        } else {
            t.len()
        };
        rng.mutate(&mut t, span);
        match Table::parse(&t).and_then(|tab| tab.funcs()) {
            Ok(_) => ok += 1,
            Err(e) => {
                assert!(!e.message().contains('\n'));
                err += 1
            }
        }
    }
    eprintln!("mutated pclntabs: {ok} decoded, {err} rejected, 0 panics");
    assert!(err > 0);
}

#[test]
fn mutated_executables_never_panic() {
    let elf = read_fixture("service.amd64.stripped.gz");
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let (mut ok, mut err) = (0, 0);
    for _ in 0..60 {
        let mut e = elf.clone();
        rng.mutate(&mut e, 4096);
        match GoBinary::parse(&e) {
            Ok(_) => ok += 1,
            Err(_) => err += 1,
        }
    }
    eprintln!("mutated executables: {ok} decoded, {err} rejected, 0 panics");
}

#[test]
fn mutated_profiles_never_panic() {
    let gz = read_fixture("cpu.pprof");
    let mut raw = Vec::new();
    GzDecoder::new(gz.as_slice()).read_to_end(&mut raw).unwrap();
    let bin = GoBinary::parse(&read_fixture("service.amd64.stripped.gz")).unwrap();
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    let (mut ok, mut err) = (0, 0);
    for round in 0..3000 {
        let mut p = if round % 4 == 0 {
            gz.clone()
        } else {
            raw.clone()
        };
        let span = p.len();
        rng.mutate(&mut p, span);
        match Profile::parse(&p) {
            Ok(prof) => {
                ok += 1;
                let _ = analyze(&bin, &prof, &Options::default());
            }
            Err(e) => {
                assert!(!e.message().contains('\n'));
                err += 1
            }
        }
    }
    eprintln!("mutated profiles: {ok} decoded (and analysed), {err} rejected, 0 panics");
    assert!(ok > 0 && err > 0);
}

#[test]
fn mutated_code_never_panics() {
    for fixture in ["service.amd64.gz", "service.arm64.gz"] {
        let elf = read_fixture(fixture);
        let i = apply::inspect(&elf).unwrap();
        let b = GoBinary::parse(&elf).unwrap();
        let f = b.funcs.iter().find(|f| f.name == apply::FUNC).unwrap();
        let code = &elf[i.func_offset as usize..][..f.code_size as usize];
        let mut rng = Rng(0x0bad_c0de_5eed_0001);
        let (mut ok, mut err) = (0, 0);
        for round in 0..4000 {
            let mut c = code.to_vec();
            if round % 16 == 0 {
                let span = c.len();
                rng.mutate(&mut c, span);
            } else {
                let n = c.len();
                rng.poke(&mut c, 0, n);
            }
            match codescan::find_starting_stack(i.arch, &c, i.func_address) {
                Ok(s) => {
                    ok += 1;
                    assert_ne!(s.stores, 0);
                }
                Err(e) => {
                    assert!(!e.message().contains('\n'));
                    err += 1
                }
            }
        }
        eprintln!(
            "{fixture}: mutated {}: {ok} found, {err} refused, 0 panics",
            apply::FUNC
        );
        assert!(ok > 0 && err > 0);
    }
}

#[test]
fn mutated_executables_never_panic_in_apply() {
    let elf = read_fixture("service.amd64.gz");
    let i = apply::inspect(&elf).unwrap();
    let magic = elf
        .windows(14)
        .position(|w| w == weft_gostack::buildinfo::MAGIC)
        .unwrap();
    // The ELF and program headers, the function's first bytes, the variable and the build
    // info: the places `inspect` reads.
    let f = i.func_offset as usize;
    let v = i.var_offset as usize;
    let regions = [
        (0, 0x300),
        (f, f + 128),
        (v - 32, v + 32),
        (magic, magic + 256),
    ];
    let mut rng = Rng(0x5eed_f00d_1234_0002);
    let (mut ok, mut err) = (0, 0);
    for round in 0..160 {
        let (lo, hi) = regions[round % regions.len()];
        let mut e = elf.clone();
        rng.poke(&mut e, lo, hi);
        match apply::inspect(&e) {
            Ok(_) => {
                ok += 1;
                let _ = apply::apply(&e, 32768, round % 2 == 0);
            }
            Err(p) => {
                assert!(!p.message().contains('\n'));
                err += 1
            }
        }
    }
    eprintln!("mutated executables: {ok} inspected, {err} refused, 0 panics");
    assert!(ok > 0 && err > 0);
}
