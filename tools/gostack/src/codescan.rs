//! Code patterns: where `runtime.gcComputeStartingStackSize` stores the starting stack size.
//!
//! Owns reading one function's machine code for the stores `apply` needs. Go's runtime keeps
//! the starting goroutine stack in `var startingStackSize uint32 = fixedStack`, and
//! `gcComputeStartingStackSize` is the only code that writes it; one of its writes is the
//! constant `fixedStack` (2048 on linux). A stripped binary has no symbol for the
//! variable, but the pclntab still names the function, and that constant store gives the
//! variable's address:
//!
//! ```text
//! amd64  MOVL $0x800, runtime.startingStackSize(SB)   c7 05 <disp32> 00 08 00 00
//!                                                      (RIP-relative: target = next PC + disp32)
//! arm64  ORR  $2048, ZR, R0     (or MOVZ $2048, R0)    the value, in the instruction before
//!        ADRP sym, R27                                 page of the target
//!        [ADD $lo12, R27, R27]                         (when the offset does not fit the store)
//!        MOVW R0, lo12(R27)                            STR W0, [X27, #lo12] (or STUR)
//! ```
//!
//! Invariants:
//! 1. amd64 code is decoded instruction by instruction from the entry (`iced-x86`), so a
//!    match never starts inside another instruction; a byte sequence that does not decode
//!    is an error.
//! 2. arm64 code is read as aligned 32-bit words; a store counts only in an unbroken
//!    `ADRP` (+ `ADD`) + `STR`/`STUR` sequence on one base register, which is how the Go
//!    assembler expands a store to a symbol.
//! 3. A constant is attributed to an arm64 store only when the instruction right before the
//!    `ADRP` writes the stored register with `MOVZ` or `ORR …, ZR` (the bitmask immediate
//!    decoded in full).
//! 4. [`find_starting_stack`] accepts only a function with exactly one constant store of
//!    `fixedStack` and no 32-bit store to any other PC-relative address: any other shape is
//!    a [`Problem`] that says what was seen.
//!
//! May call: nothing but `iced-x86`. Called by: `apply`.
//!
//! Why a decoder and not a byte search on amd64: the issue's first finding was a byte
//! pattern, but a byte search can match across instruction boundaries; decoding the one
//! function linearly is exact (Go puts no data in its text) and cheap. arm64 needs no
//! decoder: every instruction is one aligned word.

use crate::binary::Arch;
use crate::error::{ParseResult, Problem};

/// `fixedStack` on linux (amd64 and arm64): the runtime's smallest goroutine stack and the
/// initial value of `runtime.startingStackSize`.
pub const FIXED_STACK: u32 = 2048;

/// arm64 `RET` (return to the address in the link register, X30).
pub const ARM64_RET: u32 = 0xd65f_03c0;
/// amd64 `RET`.
pub const AMD64_RET: u8 = 0xc3;
/// amd64 `INT3`, the linker's padding: what follows a patched-in `RET` to the end of the
/// instruction it replaced, so the rest of the function still decodes.
pub const AMD64_INT3: u8 = 0xcc;

/// A 32-bit store to a PC-relative address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Store {
    /// Address of the storing instruction.
    pub at: u64,
    /// Address written.
    pub target: u64,
    /// The value stored, when it is a constant the scan can see.
    pub constant: Option<u64>,
}

/// What one function's code shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeFacts {
    /// Every 32-bit store to a PC-relative address, in code order.
    pub stores: Vec<Store>,
    /// The first instruction is a `RET`: the function does nothing.
    pub returns_at_entry: bool,
    /// Length in bytes of the first instruction (what a patched-in `RET` must cover).
    pub entry_len: usize,
}

/// What [`find_starting_stack`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartingStack {
    /// Address of `runtime.startingStackSize`.
    pub address: u64,
    /// Stores to it in the function (the constant one included).
    pub stores: usize,
    /// The function returns at its entry (a neutralised recomputation).
    pub returns_at_entry: bool,
    /// Length of the function's first instruction.
    pub entry_len: usize,
}

/// Reads the 32-bit PC-relative stores of the function whose code is `code`, loaded at
/// `addr`.
pub fn scan(arch: Arch, code: &[u8], addr: u64) -> ParseResult<CodeFacts> {
    if code.is_empty() {
        return Err(Problem::new("the function has no code"));
    }
    match arch {
        Arch::Amd64 => scan_amd64(code, addr),
        Arch::Arm64 => scan_arm64(code, addr),
    }
}

/// Finds `runtime.startingStackSize` from `runtime.gcComputeStartingStackSize`'s code (see
/// invariant 4).
pub fn find_starting_stack(arch: Arch, code: &[u8], addr: u64) -> ParseResult<StartingStack> {
    let facts = scan(arch, code, addr)?;
    let fixed: Vec<&Store> = facts
        .stores
        .iter()
        .filter(|s| s.constant == Some(u64::from(FIXED_STACK)))
        .collect();
    let target = match fixed.as_slice() {
        [one] => one.target,
        [] => {
            return Err(Problem::new(format!(
                "no store of {FIXED_STACK} (fixedStack) in the function's {} bytes of code \
                 ({} other 32-bit stores): code shape not recognised",
                code.len(),
                facts.stores.len()
            )))
        }
        many => {
            return Err(Problem::new(format!(
                "{} stores of {FIXED_STACK} (fixedStack) where one was expected: code shape \
                 not recognised",
                many.len()
            )))
        }
    };
    if let Some(other) = facts.stores.iter().find(|s| s.target != target) {
        return Err(Problem::new(format!(
            "the function stores to {:#x} at {:#x} as well as to {target:#x}: code shape not \
             recognised",
            other.target, other.at
        )));
    }
    Ok(StartingStack {
        address: target,
        stores: facts.stores.len(),
        returns_at_entry: facts.returns_at_entry,
        entry_len: facts.entry_len,
    })
}

/// The bytes that make a function of this architecture return at its entry, covering the
/// whole first instruction (`entry_len` bytes).
pub fn return_at_entry(arch: Arch, entry_len: usize) -> Vec<u8> {
    match arch {
        Arch::Amd64 => {
            let mut b = vec![AMD64_INT3; entry_len.max(1)];
            b[0] = AMD64_RET;
            b
        }
        Arch::Arm64 => ARM64_RET.to_le_bytes().to_vec(),
    }
}

fn scan_amd64(code: &[u8], addr: u64) -> ParseResult<CodeFacts> {
    use iced_x86::{Decoder, DecoderOptions, MemorySize, Mnemonic, OpKind, Register};
    let mut d = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
    let mut stores = Vec::new();
    let mut first = None;
    while d.can_decode() {
        let ins = d.decode();
        if ins.is_invalid() {
            return Err(Problem::new(format!(
                "the code at {:#x} does not decode as amd64",
                ins.ip()
            )));
        }
        if first.is_none() {
            first = Some((
                ins.mnemonic() == Mnemonic::Ret && ins.op_count() == 0,
                ins.len(),
            ));
        }
        if ins.mnemonic() == Mnemonic::Mov
            && ins.op_count() == 2
            && ins.op0_kind() == OpKind::Memory
            && ins.memory_base() == Register::RIP
            && matches!(ins.memory_size(), MemorySize::UInt32 | MemorySize::Int32)
        {
            let constant = match ins.op1_kind() {
                OpKind::Immediate32 => Some(u64::from(ins.immediate32())),
                _ => None,
            };
            stores.push(Store {
                at: ins.ip(),
                // For RIP-relative operands the decoder gives the absolute address.
                target: ins.memory_displacement64(),
                constant,
            });
        }
    }
    let (returns_at_entry, entry_len) = first.unwrap_or((false, 0));
    Ok(CodeFacts {
        stores,
        returns_at_entry,
        entry_len,
    })
}

fn scan_arm64(code: &[u8], addr: u64) -> ParseResult<CodeFacts> {
    if !code.len().is_multiple_of(4) || !addr.is_multiple_of(4) {
        return Err(Problem::new(format!(
            "arm64 code of {} bytes at {addr:#x} is not whole aligned instructions",
            code.len()
        )));
    }
    let words: Vec<u32> = code
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let pc = |i: usize| addr.wrapping_add(4 * i as u64);
    let mut stores = Vec::new();
    for (i, &w) in words.iter().enumerate() {
        let Some((base_reg, page)) = adrp(w, pc(i)) else {
            continue;
        };
        let mut base = page;
        let mut j = i + 1;
        if let Some((rd, rn, imm)) = words.get(j).and_then(|&w| add_imm(w)) {
            if rd == base_reg && rn == base_reg {
                base = base.wrapping_add(imm);
                j += 1;
            }
        }
        let Some((rt, rn, off)) = words.get(j).and_then(|&w| store_w(w)) else {
            continue;
        };
        if rn != base_reg {
            continue;
        }
        let constant = if rt == 31 {
            Some(0) // WZR
        } else {
            i.checked_sub(1)
                .and_then(|k| mov_imm(words[k]))
                .filter(|(rd, _)| *rd == rt)
                .map(|(_, v)| v & 0xffff_ffff)
        };
        stores.push(Store {
            at: pc(j),
            target: base.wrapping_add_signed(off),
            constant,
        });
    }
    Ok(CodeFacts {
        stores,
        returns_at_entry: words.first() == Some(&ARM64_RET),
        entry_len: 4,
    })
}

/// `ADRP Xd, label`: (d, the label's 4 KiB page).
fn adrp(w: u32, pc: u64) -> Option<(u32, u64)> {
    if w & 0x9f00_0000 != 0x9000_0000 {
        return None;
    }
    let immlo = u64::from((w >> 29) & 3);
    let immhi = u64::from((w >> 5) & 0x7_ffff);
    let imm21 = (immhi << 2) | immlo;
    // Sign-extend 21 bits, then pages of 4 KiB.
    let off = ((imm21 << 43) as i64 >> 43) << 12;
    Some((w & 31, (pc & !0xfff).wrapping_add_signed(off)))
}

/// `ADD Xd, Xn, #imm{, LSL #12}` (64-bit, immediate): (d, n, imm).
fn add_imm(w: u32) -> Option<(u32, u32, u64)> {
    if w & 0xff80_0000 != 0x9100_0000 {
        return None;
    }
    let imm = u64::from((w >> 10) & 0xfff) << (12 * ((w >> 22) & 1));
    Some((w & 31, (w >> 5) & 31, imm))
}

/// `STR Wt, [Xn, #imm]` (unsigned offset, scaled by 4) or `STUR Wt, [Xn, #simm9]`:
/// (t, n, offset).
fn store_w(w: u32) -> Option<(u32, u32, i64)> {
    let (t, n) = (w & 31, (w >> 5) & 31);
    if w & 0xffc0_0000 == 0xb900_0000 {
        return Some((t, n, i64::from((w >> 10) & 0xfff) * 4));
    }
    if w & 0xffe0_0c00 == 0xb800_0000 {
        let imm9 = i64::from((w >> 12) & 0x1ff);
        return Some((t, n, (imm9 << 55) >> 55));
    }
    None
}

/// `MOVZ Rd, #imm16, LSL #hw` or `ORR Rd, ZR, #bitmask` (32- or 64-bit): (d, value).
fn mov_imm(w: u32) -> Option<(u32, u64)> {
    let rd = w & 31;
    let sf = w >> 31 == 1;
    if w & 0x7f80_0000 == 0x5280_0000 {
        let hw = (w >> 21) & 3;
        if !sf && hw > 1 {
            return None;
        }
        return Some((rd, u64::from((w >> 5) & 0xffff) << (16 * hw)));
    }
    if w & 0x7f80_0000 == 0x3200_0000 && (w >> 5) & 31 == 31 {
        let n = (w >> 22) & 1;
        let immr = (w >> 16) & 0x3f;
        let imms = (w >> 10) & 0x3f;
        return bitmask(n, imms, immr, if sf { 64 } else { 32 }).map(|v| (rd, v));
    }
    None
}

/// The Arm ARM's `DecodeBitMasks` for a logical immediate: the value of (N, imms, immr) in a
/// register of `width` bits, `None` for a reserved encoding.
fn bitmask(n: u32, imms: u32, immr: u32, width: u32) -> Option<u64> {
    if width == 32 && n == 1 {
        return None;
    }
    // The element size is 2^len, len being the highest set bit of N:NOT(imms).
    let combined = (n << 6) | (!imms & 0x3f);
    if combined == 0 {
        return None;
    }
    let len = 31 - combined.leading_zeros();
    if len < 1 {
        return None;
    }
    let esize = 1u32 << len;
    let levels = esize - 1;
    let s = imms & levels;
    let r = immr & levels;
    if s == levels {
        return None;
    }
    let ones = |k: u32| if k >= 64 { u64::MAX } else { (1u64 << k) - 1 };
    let welem = ones(s + 1);
    let emask = ones(esize);
    let elem = if r == 0 {
        welem
    } else {
        ((welem >> r) | (welem << (esize - r))) & emask
    };
    let mut v = 0u64;
    let mut at = 0;
    while at < width {
        v |= elem << at;
        at += esize;
    }
    Some(v & ones(width))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// The tail of Go 1.27.3's arm64 gcComputeStartingStackSize at 0x6c500 (non-PIE).
    const ARM64_STORE_2048: [u32; 4] = [
        0xb275_03e0, // ORR $2048, ZR, R0
        0x9000_0bbb, // ADRP 1523712(PC), R27
        0xb905_bf60, // MOVW R0, 1468(R27)
        0xd65f_03c0, // RET
    ];

    #[test]
    fn decodes_arm64_bitmask_and_movz() {
        assert_eq!(mov_imm(0xb275_03e0), Some((0, 2048)));
        assert_eq!(mov_imm(0xb275_03e1), Some((1, 2048)));
        // MOVZ W1, #0x800 and MOVZ X1, #0x800
        assert_eq!(mov_imm(0x5281_0001), Some((1, 2048)));
        assert_eq!(mov_imm(0xd281_0001), Some((1, 2048)));
        // ORR $1, ZR, R2 (b24003e2)
        assert_eq!(mov_imm(0xb240_03e2), Some((2, 1)));
        // 32-bit ORR W0, WZR, #0xff00ff00 (N=0, immr=8, imms=0b100111... element 16 bits)
        assert_eq!(bitmask(0, 0b100111, 8, 32), Some(0xff00_ff00));
        assert_eq!(bitmask(1, 0x3f, 0, 64), None);
    }

    #[test]
    fn finds_arm64_store_after_adrp() {
        let addr = 0x6c590;
        let code = words(&ARM64_STORE_2048);
        let f = scan(Arch::Arm64, &code, addr).unwrap();
        let page = (0x6c594 & !0xfff) + 1_523_712;
        assert_eq!(
            f.stores,
            [Store {
                at: 0x6c598,
                target: page + 1468,
                constant: Some(2048)
            }]
        );
        assert!(!f.returns_at_entry);
        let s = find_starting_stack(Arch::Arm64, &code, addr).unwrap();
        assert_eq!(s.address, page + 1468);
    }

    #[test]
    fn arm64_add_between_adrp_and_store_counts() {
        // ADRP X27, +1 page; ADD X27, X27, #0x10; STR W3, [X27, #8] with MOVZ W3,#2048 before.
        let code = words(&[0x5281_0003, 0xb000_001b, 0x9100_437b, 0xb900_0b63]);
        let f = scan(Arch::Arm64, &code, 0x1000).unwrap();
        assert_eq!(
            f.stores,
            [Store {
                at: 0x100c,
                target: 0x2000 + 0x10 + 8,
                constant: Some(2048)
            }]
        );
    }

    #[test]
    fn finds_amd64_immediate_store() {
        // Go 1.27.3's two stores, moved next to each other: MOVL $0x800, disp(%rip) at
        // 0x46025c and MOVL AX, disp(%rip) at 0x460266, both to 0x5cf5bc; then RET.
        let code = [
            0xc7, 0x05, 0x56, 0xf3, 0x16, 0x00, 0x00, 0x08, 0x00, 0x00, //
            0x89, 0x05, 0x50, 0xf3, 0x16, 0x00, //
            0xc3,
        ];
        let f = scan(Arch::Amd64, &code, 0x46025c).unwrap();
        assert_eq!(
            f.stores,
            [
                Store {
                    at: 0x46025c,
                    target: 0x5cf5bc,
                    constant: Some(2048)
                },
                Store {
                    at: 0x460266,
                    target: 0x5cf5bc,
                    constant: None
                }
            ]
        );
        let s = find_starting_stack(Arch::Amd64, &code, 0x46025c).unwrap();
        assert_eq!((s.address, s.stores, s.entry_len), (0x5cf5bc, 2, 10));
    }

    #[test]
    fn refuses_two_targets_and_no_constant() {
        // Two constant stores of 2048 to different places.
        let code = [
            0xc7, 0x05, 0x10, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, //
            0xc7, 0x05, 0x20, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0xc3,
        ];
        let e = find_starting_stack(Arch::Amd64, &code, 0x1000).unwrap_err();
        assert!(e.message().contains("2 stores of 2048"), "{e}");
        let e = find_starting_stack(Arch::Amd64, &[0xc3], 0x1000).unwrap_err();
        assert!(e.message().contains("no store of 2048"), "{e}");
        // A register store elsewhere next to the constant one.
        let code = [
            0xc7, 0x05, 0x10, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, //
            0x89, 0x05, 0x00, 0x01, 0x00, 0x00, 0xc3,
        ];
        let e = find_starting_stack(Arch::Amd64, &code, 0x1000).unwrap_err();
        assert!(e.message().contains("as well as"), "{e}");
    }

    #[test]
    fn a_patched_entry_reads_as_return_and_still_decodes() {
        // CMPL 0x19daa9(%rip), $0 (7 bytes) then the constant store.
        let mut code = vec![0x83, 0x3d, 0xa9, 0xda, 0x19, 0x00, 0x00];
        code.extend([0xc7, 0x05, 0x10, 0, 0, 0, 0, 0x08, 0, 0, 0xc3]);
        let before = find_starting_stack(Arch::Amd64, &code, 0x1000).unwrap();
        assert!(!before.returns_at_entry);
        assert_eq!(before.entry_len, 7);
        let patch = return_at_entry(Arch::Amd64, before.entry_len);
        code[..7].copy_from_slice(&patch);
        let after = find_starting_stack(Arch::Amd64, &code, 0x1000).unwrap();
        assert!(after.returns_at_entry);
        assert_eq!(after.address, before.address);

        let mut code = words(&[0xd000_0d3b]);
        code.extend(words(&ARM64_STORE_2048));
        let before = find_starting_stack(Arch::Arm64, &code, 0x6c58c).unwrap();
        code[..4].copy_from_slice(&return_at_entry(Arch::Arm64, 4));
        let after = find_starting_stack(Arch::Arm64, &code, 0x6c58c).unwrap();
        assert!(after.returns_at_entry && !before.returns_at_entry);
        assert_eq!(after.address, before.address);
    }

    #[test]
    fn undecodable_or_unaligned_code_is_a_problem() {
        assert!(scan(Arch::Amd64, &[0x0f, 0xff], 0).is_err());
        assert!(scan(Arch::Arm64, &[0; 6], 0).is_err());
        assert!(scan(Arch::Arm64, &[0; 8], 2).is_err());
        assert!(scan(Arch::Amd64, &[], 0).is_err());
    }
}
