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
    for (n, (go, version)) in go_toolchains(go).iter().enumerate() {
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

/// `frames` output without the entry column (text) or fields (JSON): a PIE build places
/// the same functions at other offsets, and a header-less file does not say where its text
/// starts.
fn without_entries(out: &str, json: bool) -> String {
    if json {
        return out
            .lines()
            .filter(|l| !l.trim_start().starts_with("\"entry"))
            .collect::<Vec<_>>()
            .join("\n");
    }
    out.lines()
        .map(|l| {
            let mut cols: Vec<&str> = l.split_whitespace().collect();
            if cols.len() >= 4 && cols[0].parse::<u64>().is_ok() {
                cols.remove(2);
            }
            cols.join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
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
        // The stripped build is the same link: even the entries agree.
        assert!(
            run(&builds[1]) == want,
            "frames output of the stripped build differs"
        );
        let want = without_entries(&want, json);
        for p in &builds[2..] {
            assert!(
                without_entries(&run(p), json) == want,
                "frames output of {} differs",
                p.display()
            );
        }
    }
    eprintln!("frames: plain, stripped (-s -w), PIE and header-less builds print identical output");
}

/// An ABI wrapper carries the name of the function it wraps: the two `runtime.newstack`
/// rows (a 304-byte frame and the 8-byte wrapper) must differ in entry and wrapper mark.
#[test]
fn rows_sharing_a_name_show_their_entry_and_wrapper_mark() {
    let bin = fixture_binary("service.amd64");
    let (code, out, err) = cli(&["frames".as_ref(), bin.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.split_whitespace().nth(3) == Some("runtime.newstack"))
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let cols = |l: &str| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let (big, small) = (cols(rows[0]), cols(rows[1]));
    assert_eq!((big[0].as_str(), small[0].as_str()), ("304", "8"));
    assert!(big[2].starts_with("0x") && small[2].starts_with("0x"));
    assert_ne!(big[2], small[2], "the two rows have the same entry");
    assert_eq!(big.len(), 4, "the function itself is marked: {}", rows[0]);
    assert_eq!(
        small.get(4).map(String::as_str),
        Some("[wrapper]"),
        "{}",
        rows[1]
    );

    let (code, out, err) = cli(&["frames".as_ref(), bin.as_os_str(), "--json".as_ref()]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows: Vec<&serde_json::Value> = v["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["name"] == "runtime.newstack")
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["wrapper"], false);
    assert_eq!(rows[1]["wrapper"], true);
    assert_ne!(rows[0]["entry"], rows[1]["entry"]);
    assert!(rows[0]["entry"].as_u64().unwrap() > rows[0]["entry_offset"].as_u64().unwrap());
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
