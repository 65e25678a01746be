//! Fuzzes the executable and pclntab parsers: any bytes give functions or an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_gostack::binary::GoBinary;
use weft_gostack::pclntab::Table;

fuzz_target!(|data: &[u8]| {
    if let Ok(t) = Table::parse(data) {
        let _ = t.funcs();
    }
    let _ = GoBinary::parse(data);
});
