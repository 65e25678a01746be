//! Fuzzes the code-pattern scanner and the inspection of whole executables behind `apply`
//! and `verify`: any bytes give a store site, a refusal, or (for amd64 code) a site that a
//! patched-in `RET` leaves in place.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_gostack::apply;
use weft_gostack::binary::Arch;
use weft_gostack::codescan;

fuzz_target!(|data: &[u8]| {
    if data.len() > 9 {
        let arch = if data[0] & 1 == 0 {
            Arch::Amd64
        } else {
            Arch::Arm64
        };
        let addr = u64::from_le_bytes(data[1..9].try_into().unwrap());
        let code = &data[9..];
        if let Ok(site) = codescan::find_starting_stack(arch, code, addr) {
            let patch = codescan::return_at_entry(arch, site.entry_len);
            let mut patched = code.to_vec();
            patched[..patch.len()].copy_from_slice(&patch);
            let again = codescan::find_starting_stack(arch, &patched, addr);
            // amd64: the RET and INT3s cover exactly the first instruction, so every store
            // after it decodes as before.
            let first_is_store = codescan::scan(arch, code, addr)
                .map(|f| f.stores.iter().any(|s| s.at == addr))
                .unwrap_or(true);
            if arch == Arch::Amd64 && !first_is_store {
                let again = again.expect("a patched entry hides the store");
                assert_eq!(again.address, site.address);
                assert!(again.returns_at_entry);
            } else if let Ok(again) = again {
                assert!(again.returns_at_entry);
            }
        }
    }
    if apply::inspect(data).is_ok() {
        let _ = apply::apply(data, 32768, true);
    }
});
