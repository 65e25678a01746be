//! `frames` against the reference: the prologues `go tool objdump` shows.

mod common;

use common::*;
use weft_gostack::binary::GoBinary;

fn check(label: &str, bin: &GoBinary, objdump: &str) {
    let c = compare(bin, objdump);
    eprintln!(
        "{label}: {} functions, {} compared, {} matched; Go functions differing: {}; \
         assembly functions compared {}, differing {}: {:?}",
        c.functions,
        c.compared,
        c.matched,
        c.go_mismatches.len(),
        c.asm_compared,
        c.asm_mismatches.len(),
        c.asm_mismatches
    );
    assert!(
        c.compared > 1500,
        "{label}: only {} functions compared",
        c.compared
    );
    assert!(
        c.go_mismatches.is_empty(),
        "{label}: compiled Go functions whose pclntab frame differs from objdump: {:?}",
        c.go_mismatches
    );
}

#[test]
fn frames_match_checked_in_objdump_amd64() {
    let bin = GoBinary::parse(&read_fixture("service.amd64.gz")).unwrap();
    let od = String::from_utf8(read_fixture("service.amd64.objdump.gz")).unwrap();
    check("checked-in amd64", &bin, &od);
}

#[test]
fn frames_match_checked_in_objdump_arm64() {
    let bin = GoBinary::parse(&read_fixture("service.arm64.gz")).unwrap();
    let od = String::from_utf8(read_fixture("service.arm64.objdump.gz")).unwrap();
    check("checked-in arm64", &bin, &od);
}

/// Builds the fixture with the Go toolchain (and with every extra toolchain listed in
/// `GOSTACK_EXTRA_GO`, colon-separated paths of `go` binaries, to check other Go
/// versions) for amd64 and arm64, and compares with their `go tool objdump`.
#[test]
fn frames_match_live_objdump() {
    let Some(go) = go_or_skip("frames_match_live_objdump") else {
        return;
    };
    let mut gos = vec![go];
    if let Ok(extra) = std::env::var("GOSTACK_EXTRA_GO") {
        gos.extend(extra.split(':').filter(|s| !s.is_empty()).map(Into::into));
    }
    for (n, go) in gos.iter().enumerate() {
        let version = std::process::Command::new(go)
            .arg("version")
            .output()
            .expect("go version");
        let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
        for arch in ["amd64", "arm64"] {
            let path = go_build(go, &format!("frames.{n}.{arch}"), arch, &["-ldflags=-w"]);
            let out = std::process::Command::new(go)
                .args(["tool", "objdump"])
                .arg(&path)
                .output()
                .expect("go tool objdump");
            assert!(out.status.success(), "go tool objdump failed");
            let bin = GoBinary::parse(&std::fs::read(&path).unwrap()).unwrap();
            let label = format!("live {version} {arch}");
            check(&label, &bin, &String::from_utf8_lossy(&out.stdout));
        }
    }
}

#[test]
fn stripped_pie_and_headerless_builds_give_identical_frames() {
    let builds = amd64_builds();
    let b = GoBinary::parse(&std::fs::read(&builds[3]).unwrap()).unwrap();
    assert!(
        b.pclntab_location.starts_with("scan"),
        "{}",
        b.pclntab_location
    );
    for json in [false, true] {
        let run = |p: &std::path::Path| {
            let mut args = vec!["frames".as_ref(), p.as_os_str()];
            if json {
                args.push("--json".as_ref());
            }
            let (code, out, err) = cli(&args);
            assert_eq!(code, 0, "{err}");
            out
        };
        let want = run(&builds[0]);
        assert!(want.lines().count() > 1500);
        for p in &builds[1..] {
            assert!(run(p) == want, "frames output of {} differs", p.display());
        }
    }
    eprintln!("frames: plain, stripped (-s -w), PIE and header-less builds print identical output");
}

#[test]
fn top_limits_rows() {
    let (code, out, _) = cli(&[
        "frames".as_ref(),
        fixture_binary("service.amd64").as_os_str(),
        "--top".as_ref(),
        "3".as_ref(),
    ]);
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 2 + 3);
    assert!(out.starts_with("go1."), "{out}");
}
