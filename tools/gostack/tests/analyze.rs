//! `analyze` on the fixture service's checked-in profile, and on a fresh one when Go is
//! present: the computed need against the true need the service measured.

mod common;

use common::*;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use weft_gostack::analyze::{analyze, Analysis, Options};
use weft_gostack::binary::GoBinary;
use weft_gostack::pprof::Profile;

/// Checks the leaf chain's need against the service's measured need; returns the error.
fn check_against_truth(label: &str, a: &Analysis, service_out: &str) -> f64 {
    let truth = service_value(service_out, "true_stack_need_bytes");
    let leaf = a
        .chains
        .iter()
        .find(|c| c.grew == "main.leaf")
        .unwrap_or_else(|| panic!("{label}: no growth chain ends in main.leaf"));
    let err = (leaf.need as f64 - truth as f64) / truth as f64;
    let frames_only = u64::from(a.start_reserve) + leaf.frames_bytes;
    let r = a.recommendation.expect("a recommendation");
    eprintln!(
        "{label}: true need {truth} B; computed need {} B ({:+.2}%; frames {} B + reserve {} B \
         = {} B, {:+.2}%, + guard {} B); growth {:.1}% of CPU; recommended {} B, removing \
         {:.1}% of growth CPU",
        leaf.need,
        err * 100.0,
        leaf.frames_bytes,
        a.start_reserve,
        frames_only,
        (frames_only as f64 - truth as f64) / truth as f64 * 100.0,
        a.guard,
        a.growth.share * 100.0,
        r.size,
        r.removes_growth_share * 100.0
    );
    assert!(
        err.abs() < 0.05,
        "{label}: computed need off by {:.2}%",
        err * 100.0
    );
    assert!(!leaf.truncated, "{label}: leaf chain cut short");
    assert_eq!(
        r.size,
        truth.next_power_of_two(),
        "{label}: recommended size"
    );
    assert_eq!(a.need.unwrap().max, leaf.need);
    err
}

#[test]
fn checked_in_profile_need_is_within_5_percent_of_truth() {
    let bin = GoBinary::parse(&read_fixture("service.amd64.gz")).unwrap();
    let p = Profile::parse(&read_fixture("cpu.pprof")).unwrap();
    let a = analyze(&bin, &p, &Options::default()).unwrap();
    let out = String::from_utf8(read_fixture("service.out")).unwrap();
    check_against_truth("checked-in profile", &a, &out);
    assert!(a.growth.share > 0.2, "growth share {}", a.growth.share);
    assert_eq!(a.hogs[0].function, "main.leaf");
    assert!(a.build_id_note.is_none(), "{:?}", a.build_id_note);
}

#[test]
fn checked_in_arm64_profile_need_is_within_5_percent_of_truth() {
    let bin = GoBinary::parse(&read_fixture("service.arm64.gz")).unwrap();
    let p = Profile::parse(&read_fixture("cpu.arm64.pprof")).unwrap();
    let a = analyze(&bin, &p, &Options::default()).unwrap();
    assert_eq!(a.start_reserve, 48);
    let out = String::from_utf8(read_fixture("service.arm64.out")).unwrap();
    check_against_truth("checked-in arm64 profile (qemu-user)", &a, &out);
}

fn analyze_cli(bin: &Path, profile: &Path, json: bool) -> String {
    let mut args: Vec<&OsStr> = vec![
        "analyze".as_ref(),
        "--binary".as_ref(),
        bin.as_os_str(),
        "--profile".as_ref(),
        profile.as_os_str(),
    ];
    if json {
        args.push("--json".as_ref());
    }
    let (code, out, err) = cli(&args);
    assert_eq!(code, 0, "{err}");
    out
}

fn assert_same_output(profile: &Path, bins: &[&Path]) {
    for json in [false, true] {
        let want = analyze_cli(bins[0], profile, json);
        assert!(want.contains("main.leaf"), "{want}");
        for b in &bins[1..] {
            assert!(
                analyze_cli(b, profile, json) == want,
                "analyze output with {} differs from {}",
                b.display(),
                bins[0].display()
            );
        }
    }
}

#[test]
fn analyze_output_is_identical_for_stripped_pie_and_headerless_builds() {
    let profile = testdata().join("cpu.pprof");
    let builds = amd64_builds();
    let refs: Vec<&Path> = builds.iter().map(PathBuf::as_path).collect();
    assert_same_output(&profile, &refs);
    let plain = &builds[0];
    let text = analyze_cli(plain, &profile, false);
    eprintln!(
        "analyze: plain, stripped, PIE and header-less builds print identical output:\n{text}"
    );
    assert!(
        text.contains("recommended starting stack: 64.0 KiB"),
        "{text}"
    );
}

#[test]
fn live_profile_of_fixture_service() {
    let Some(go) = go_or_skip("live_profile_of_fixture_service") else {
        return;
    };
    let plain = go_build(&go, "live.amd64", "amd64", &[]);
    let stripped = go_build(&go, "live.amd64.stripped", "amd64", &["-ldflags=-s -w"]);
    if std::env::consts::ARCH != "x86_64" {
        skip(
            "live_profile_of_fixture_service",
            "the fixture service is run on x86_64 hosts only",
        );
        return;
    }
    let profile = plain.with_file_name("live.cpu.pprof");
    let out = std::process::Command::new(&plain)
        .env("GODEBUG", "adaptivestackstart=0")
        .args(["-duration", "2s", "-cpuprofile"])
        .arg(&profile)
        .output()
        .expect("run the fixture service");
    assert!(out.status.success(), "fixture service failed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let bin = GoBinary::parse(&std::fs::read(&plain).unwrap()).unwrap();
    let p = Profile::parse(&std::fs::read(&profile).unwrap()).unwrap();
    let a = analyze(&bin, &p, &Options::default()).unwrap();
    check_against_truth("live profile", &a, &stdout);
    // PIE is covered by the checked-in builds; rebuilding the standard library in PIE
    // mode would add a cold-cache minute to CI.
    assert_same_output(&profile, &[&plain, &stripped]);
}
