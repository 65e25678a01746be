//! Fuzzes the pprof decoder and the analysis behind it: any bytes give a report or an
//! error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_gostack::analyze::{analyze, Options};
use weft_gostack::binary::{Arch, FuncFrame, GoBinary};
use weft_gostack::pprof::Profile;

fn binary() -> GoBinary {
    let funcs = [
        "runtime.newstack",
        "runtime.morestack",
        "runtime.copystack",
        "main.f",
        "main.g",
    ]
    .iter()
    .enumerate()
    .map(|(i, n)| FuncFrame {
        name: n.to_string(),
        frame: 64 * (i as u32 + 1),
        sp_delta_max: 64 * (i as u32 + 1) - 8,
        code_size: 16,
        entry: 16 * i as u32,
        func_id: 0,
        wrapper: false,
    })
    .collect();
    GoBinary {
        arch: Arch::Amd64,
        go_version: None,
        pclntab_versions: "go1.20+",
        pclntab_location: "fuzz".into(),
        build_id: None,
        text_start: 0,
        funcs,
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = Profile::parse(data) {
        let _ = analyze(&binary(), &p, &Options::default());
    }
});
