//! `weft::metrics::stack_profile`: sampled peak stack use per spawn site, the recommended size,
//! the near-limit flag, and sizing sites from a profile file.
//!
//! The profile is process-wide, so the tests of this file take turns (`SERIAL`).

use std::sync::Mutex;

mod common;

use common::{use_stack, watchdog};

static SERIAL: Mutex<()> = Mutex::new(());

/// The profile of the site on `line` of this file.
fn site_on(line: u32) -> weft::metrics::SiteProfile {
    let profile = weft::metrics::stack_profile();
    profile
        .sites
        .iter()
        .find(|s| s.site.line == line && s.site.file.ends_with("stack_profile.rs"))
        .cloned()
        .unwrap_or_else(|| panic!("no site on line {line} in {profile:#?}"))
}

#[test]
fn a_site_using_40_of_64_kib_is_flagged_and_a_shallow_one_is_not() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _done = watchdog(
        "a_site_using_40_of_64_kib_is_flagged_and_a_shallow_one_is_not",
        60,
    );
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let (deep, shallow) = rt.block_on(|| {
        let small = weft::task::Builder::new().stack_size(64 << 10);
        let mut deep_line = 0;
        let mut shallow_line = 0;
        // The deep tasks run first on warm slots of shallow ones and the other way round:
        // each sample must measure its own task, not what the slot's last task touched.
        for round in 0..20 {
            let (line, deep) = (line!(), small.clone().spawn(use_stack::<{ 40 << 10 }>));
            deep_line = line;
            deep.unwrap().join().unwrap();
            let (line, shallow) = (line!(), small.clone().spawn(move || round));
            shallow_line = line;
            shallow.unwrap().join().unwrap();
        }
        (site_on(deep_line), site_on(shallow_line))
    });
    assert_eq!(deep.tasks, 20, "{deep:?}");
    assert!(deep.samples >= 4, "{deep:?}");
    assert_eq!(deep.configured_bytes, 64 << 10, "{deep:?}");
    assert!(
        deep.max_bytes >= 40 << 10 && deep.max_bytes < 60 << 10,
        "{deep:?}"
    );
    assert!(deep.p50_bytes >= 40 << 10, "{deep:?}");
    assert!(deep.near_limit, "{deep:?}");
    assert!(deep.recommended_bytes > 64 << 10, "{deep:?}");

    assert!(shallow.samples >= 4, "{shallow:?}");
    assert!(
        shallow.max_bytes > 0 && shallow.max_bytes < 40 << 10,
        "{shallow:?}"
    );
    assert!(!shallow.near_limit, "{shallow:?}");
    assert!(shallow.recommended_bytes <= 64 << 10, "{shallow:?}");
}

#[test]
fn a_profile_file_sizes_its_sites_in_the_next_run() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _done = watchdog("a_profile_file_sizes_its_sites_in_the_next_run", 60);
    let path = std::env::temp_dir().join(format!("weft-profile-{}.txt", std::process::id()));
    let _ = std::fs::remove_file(&path);
    /// One spawn site, used by both runs; its tasks use 40 KiB of stack, which on the
    /// default 256 KiB stack gives a recommendation of 128 KiB.
    fn run_site() {
        for _ in 0..8 {
            weft::spawn(use_stack::<{ 40 << 10 }>).join().unwrap();
        }
    }
    let regions_of = |bytes: usize| {
        weft::metrics::snapshot()
            .stack_regions
            .iter()
            .filter(|r| r.slot_bytes == bytes)
            .map(|r| r.carved_bytes)
            .sum::<usize>()
    };
    // First run: no file yet; the profile is written when the runtime drops.
    let rt = weft::Runtime::builder()
        .workers(1)
        .stack_profile(&path)
        .build()
        .unwrap();
    rt.block_on(run_site);
    drop(rt);
    let text = std::fs::read_to_string(&path).expect("the profile was not written");
    let line = text
        .lines()
        .find(|l| l.contains("stack_profile.rs") && l.contains("\t131072\t"))
        .unwrap_or_else(|| panic!("no 128 KiB site in the profile:\n{text}"));
    assert!(line.contains("near_limit=no"), "{line}");
    // Second run: the site's tasks get 128 KiB slots, which nothing else here uses.
    let before = regions_of(128 << 10);
    let rt = weft::Runtime::builder()
        .workers(1)
        .stack_profile(&path)
        .build()
        .unwrap();
    rt.block_on(run_site);
    drop(rt);
    assert!(regions_of(128 << 10) > before, "no 128 KiB slot was used");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_bad_profile_file_is_an_error_naming_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let path = std::env::temp_dir().join(format!("weft-bad-profile-{}.txt", std::process::id()));
    std::fs::write(&path, "src/main.rs:10:5\tlots\n").unwrap();
    let err = weft::Runtime::builder()
        .stack_profile(&path)
        .build()
        .unwrap_err();
    let _ = std::fs::remove_file(&path);
    let message = err.to_string();
    assert!(
        message.contains("stack profile") && message.contains("line 1"),
        "{message}"
    );
}

/// Set for the subprocess half of `weft_stack_profile_applies_a_profile_without_code_changes`.
const CHILD_ENV: &str = "WEFT_TEST_STACK_PROFILE_CHILD";

/// The subprocess half of `weft_stack_profile_applies_a_profile_without_code_changes`: a
/// default runtime, so the profile comes from `WEFT_STACK_PROFILE` alone. When the file was
/// there before the runtime started, the site's tasks must have run on 128 KiB slots.
#[test]
fn stack_profile_child() {
    let Some(path) = std::env::var_os("WEFT_STACK_PROFILE") else {
        return;
    };
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let sized = std::path::Path::new(&path).exists();
    let rt = weft::Runtime::new().unwrap();
    rt.block_on(|| {
        for _ in 0..8 {
            weft::spawn(use_stack::<{ 40 << 10 }>).join().unwrap();
        }
    });
    let used_128k = weft::metrics::snapshot()
        .stack_regions
        .iter()
        .any(|r| r.slot_bytes == 128 << 10 && r.carved_bytes > 0);
    drop(rt);
    assert_eq!(
        used_128k, sized,
        "128 KiB slots used: {used_128k}, profile there: {sized}"
    );
}

#[test]
fn weft_stack_profile_applies_a_profile_without_code_changes() {
    let _done = watchdog(
        "weft_stack_profile_applies_a_profile_without_code_changes",
        60,
    );
    let path = std::env::temp_dir().join(format!("weft-env-profile-{}.txt", std::process::id()));
    let _ = std::fs::remove_file(&path);
    for run in ["first run (writes the profile)", "second run (sized by it)"] {
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "stack_profile_child", "--test-threads=1"])
            .env(CHILD_ENV, "1")
            .env("WEFT_STACK_PROFILE", &path)
            .status()
            .unwrap();
        assert!(status.success(), "{run}: {status}");
        let text = std::fs::read_to_string(&path).expect("the profile was not written");
        assert!(
            text.lines()
                .any(|l| l.contains("stack_profile.rs") && l.contains("\t131072\t")),
            "{run}: no 128 KiB site in\n{text}"
        );
    }
    let _ = std::fs::remove_file(&path);
}
