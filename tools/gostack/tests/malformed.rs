//! Malformed input gives one line `gostack: <file>: <problem>` and exit status 1, never a
//! panic.

mod common;

use common::*;
use prost::Message;
use std::ffi::OsStr;
use std::io::Write;
use std::path::Path;
use weft_gostack::pprof::{PbFunction, PbLine, PbLocation, PbProfile, PbSample, PbValueType};

fn expect_error(args: &[&OsStr], file: &Path, needle: &str) {
    let (code, out, err) = cli(args);
    assert_eq!(code, 1, "stdout: {out} stderr: {err}");
    assert!(out.is_empty(), "{out}");
    let prefix = format!("gostack: {}: ", file.display());
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(err.starts_with(&prefix), "{err}");
    assert!(err.contains(needle), "{err} does not say {needle:?}");
    assert!(!err.contains("panicked"), "{err}");
    eprintln!("{}", err.trim_end());
}

fn frames_error(file: &Path, needle: &str) {
    expect_error(&["frames".as_ref(), file.as_os_str()], file, needle);
}

fn analyze_error(bin: &Path, profile: &Path, needle: &str) {
    expect_error(
        &[
            "analyze".as_ref(),
            "--binary".as_ref(),
            bin.as_os_str(),
            "--profile".as_ref(),
            profile.as_os_str(),
        ],
        profile,
        needle,
    );
}

fn pclntab_offset(elf: &[u8]) -> usize {
    elf.windows(6)
        .position(|w| w == b"\xf1\xff\xff\xff\x00\x00")
        .expect("pclntab magic")
}

#[test]
fn non_go_binary() {
    let me = std::env::current_exe().unwrap();
    frames_error(&me, "not a Go binary");
    let text = scratch_file("hello.txt", b"hello\n");
    frames_error(&text, "not a Go binary");
    frames_error(Path::new("/nonexistent/go-binary"), "No such file");
}

#[test]
fn truncated_pclntab() {
    let elf = read_fixture("service.amd64.stripped.gz");
    let off = pclntab_offset(&elf);
    let cut = scratch_file("truncated", &elf[..off + 200_000]);
    frames_error(&cut, "truncated");
    // Without section headers the scan finds the magic but no whole table.
    let bare = without_section_headers(&elf);
    let cut = scratch_file("truncated.noshdr", &bare[..off + 200_000]);
    frames_error(&cut, "found by scanning");
    let cut = scratch_file("truncated.header", &bare[..off + 20]);
    frames_error(&cut, "truncated");
}

#[test]
fn corrupt_pclntab() {
    let mut elf = read_fixture("service.amd64.stripped.gz");
    let off = pclntab_offset(&elf);
    // The pclnOffset word (8th of the header) now points past the table.
    elf[off + 8 + 7 * 8..off + 8 + 8 * 8].copy_from_slice(&u64::MAX.to_le_bytes());
    let bad = scratch_file("corrupt.hdr", &elf);
    frames_error(&bad, "pclntab");

    let mut elf = read_fixture("service.amd64.stripped.gz");
    let pcln = u64::from_le_bytes(elf[off + 64..off + 72].try_into().unwrap()) as usize;
    // Scribble over the function table.
    for b in &mut elf[off + pcln + 8..off + pcln + 4096] {
        *b = 0x5a;
    }
    let bad = scratch_file("corrupt.functab", &elf);
    frames_error(&bad, "pclntab is corrupt");
}

#[test]
fn old_go_version() {
    let mut elf = read_fixture("service.amd64.stripped.gz");
    let off = pclntab_offset(&elf);
    elf[off] = 0xfa; // Go 1.16 magic
    let old = scratch_file("go116", &elf);
    frames_error(&old, "Go 1.16-1.17");
}

#[test]
fn bad_profiles() {
    let bin = fixture_binary("service.amd64.stripped");
    let text = scratch_file("text.pprof", b"this is not a profile\n");
    analyze_error(&bin, &text, "not a pprof profile");

    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(b"\x0a\xff\xff\xff\xff\xff not protobuf")
        .unwrap();
    let gz_text = scratch_file("gztext.pprof", &gz.finish().unwrap());
    analyze_error(&bin, &gz_text, "not a pprof protobuf");

    let good = read_fixture("cpu.pprof");
    let cut = scratch_file("cut.pprof", &good[..good.len() / 2]);
    analyze_error(&bin, &cut, "gzip");
}

/// A gzipped profile with one sample through `runtime.newstack` into `other.Handler`,
/// with two sample types given as (type, unit) pairs.
fn foreign_profile(types: [(&str, &str); 2]) -> Vec<u8> {
    let [(t0, u0), (t1, u1)] = types;
    let st: Vec<String> = [
        "",
        t0,
        u0,
        t1,
        u1,
        "runtime.newstack",
        "other.Handler",
        "other.serve",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let functions = (5..8)
        .map(|i| PbFunction {
            id: i as u64,
            name: i,
            ..Default::default()
        })
        .collect();
    let location = (5..8)
        .map(|i| PbLocation {
            id: i,
            line: vec![PbLine {
                function_id: i,
                line: 1,
                column: 0,
            }],
            ..Default::default()
        })
        .collect();
    let pb = PbProfile {
        sample_type: vec![
            PbValueType { r#type: 1, unit: 2 },
            PbValueType { r#type: 3, unit: 4 },
        ],
        sample: vec![PbSample {
            location_id: vec![5, 6, 7],
            value: vec![1, 10_000_000],
            label: vec![],
        }],
        location,
        function: functions,
        string_table: st,
        ..Default::default()
    };
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&pb.encode_to_vec()).unwrap();
    gz.finish().unwrap()
}

#[test]
fn profile_of_another_binary_or_not_of_cpu() {
    let bin = fixture_binary("service.amd64.stripped");
    let cases = [
        (
            "other.pprof",
            [("samples", "count"), ("cpu", "nanoseconds")],
            "profile is not from this binary",
        ),
        (
            "heap.pprof",
            [("alloc_objects", "count"), ("alloc_space", "bytes")],
            "not a CPU profile",
        ),
    ];
    for (name, types, needle) in cases {
        let p = scratch_file(name, &foreign_profile(types));
        analyze_error(&bin, &p, needle);
    }
}

#[test]
fn bad_coverage_is_an_error() {
    let bin = fixture_binary("service.amd64.stripped");
    let p = testdata().join("cpu.pprof");
    let (code, _, err) = cli(&[
        "analyze".as_ref(),
        "--binary".as_ref(),
        bin.as_os_str(),
        "--profile".as_ref(),
        p.as_os_str(),
        "--coverage".as_ref(),
        "150".as_ref(),
    ]);
    assert_eq!(code, 1);
    assert!(err.starts_with("gostack: --coverage: "), "{err}");
}
