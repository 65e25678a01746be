//! `apply` and `verify`: the starting stack size written into a copy of a Go executable,
//! read back, refused whenever a check fails, and (when Go is present) the copy run: its
//! reused goroutines no longer grow their stacks.

mod common;

use common::*;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use weft_gostack::apply::{self, Found, Inspection};
use weft_gostack::godebug;

const SIZE: u64 = 32768;

/// A scratch folder of its own for one test.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("gostack-apply")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn inspect(data: &[u8], label: &str) -> Inspection {
    apply::inspect(data).unwrap_or_else(|e| panic!("{label}: {e}"))
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// Runs the CLI and expects one line `gostack: <file>: …<needle>…` and exit status 1.
fn expect_refusal(args: &[&OsStr], file: &Path, needle: &str) {
    let (code, out, err) = cli(args);
    assert_eq!(code, 1, "stdout: {out} stderr: {err}");
    assert!(out.is_empty(), "{out}");
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    let prefix = format!("gostack: {}: ", file.display());
    assert!(
        err.starts_with(&prefix),
        "{err} does not start with {prefix:?}"
    );
    assert!(err.contains(needle), "{err} does not say {needle:?}");
    eprintln!("{}", err.trim_end());
}

fn apply_args<'a>(bin: &'a Path, size: &'a str, out: &'a Path) -> Vec<&'a OsStr> {
    vec![
        os("apply"),
        os("--binary"),
        bin.as_os_str(),
        os("--size"),
        os(size),
        os("-o"),
        out.as_os_str(),
    ]
}

/// Every checked-in build as a file: the amd64 ones (plain, stripped, PIE, and the last two
/// without section headers) and arm64.
fn checked_in_builds() -> Vec<PathBuf> {
    let mut v = amd64_builds();
    v.push(fixture_binary("service.arm64"));
    v
}

#[test]
fn finds_the_variable_in_every_checked_in_build() {
    let mut stripped = Vec::new();
    for path in checked_in_builds() {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let i = inspect(&std::fs::read(&path).unwrap(), &name);
        eprintln!(
            "{name}: {} {} {} at {:#x} (offset {:#x}, {:?}), {:?}, {} stores",
            i.go_version,
            i.arch.name(),
            apply::VAR,
            i.var_address,
            i.var_offset,
            i.var_section,
            i.found,
            i.stores
        );
        assert_eq!(i.size, apply::FIXED_STACK, "{name}");
        assert!(!i.neutralised, "{name}");
        assert_eq!(
            i.stores, 2,
            "{name}: the constant store and the computed one"
        );
        let headerless = name.ends_with(".noshdr");
        assert_eq!(i.var_section.is_none(), headerless, "{name}");
        let expect_found = if name.contains("stripped") || headerless {
            Found::Code
        } else {
            Found::SymbolAndCode
        };
        assert_eq!(i.found, expect_found, "{name}");
        if name.contains("stripped") {
            stripped.push((i.var_address, i.var_offset, i.func_offset));
        }
    }
    // Without section headers the text start comes from the entry point alone; it must
    // land on the same bytes.
    assert_eq!(stripped.len(), 2);
    assert_eq!(stripped[0], stripped[1]);
}

#[test]
fn apply_changes_only_the_variable_and_the_entry() {
    for path in checked_in_builds() {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let data = std::fs::read(&path).unwrap();
        for neutralise in [false, true] {
            let a = apply::apply(&data, SIZE, neutralise)
                .unwrap_or_else(|e| panic!("{name} neutralise={neutralise}: {e}"));
            assert_eq!(a.bytes.len(), data.len());
            let changed: Vec<usize> = (0..data.len()).filter(|&i| a.bytes[i] != data[i]).collect();
            let var = a.before.var_offset as usize;
            let func = a.before.func_offset as usize;
            let allowed = |i: usize| {
                (var..var + 4).contains(&i)
                    || (neutralise && (func..func + a.before.func_entry_len).contains(&i))
            };
            assert!(changed.iter().all(|&i| allowed(i)), "{name}: {changed:?}");
            assert!(
                changed.contains(&(var + 1)),
                "{name}: 2048 → 32768 changes byte 1"
            );
            assert_eq!(u64::from(a.after.size), SIZE);
            assert_eq!(a.after.neutralised, neutralise);
            assert_eq!(a.after.var_address, a.before.var_address);
            // A second application finds the size already changed and refuses.
            let e = apply::apply(&a.bytes, SIZE, neutralise).unwrap_err();
            assert!(e.message().contains("not 2048"), "{name}: {e}");
        }
    }
}

#[test]
fn cli_apply_writes_a_new_file_and_verify_reads_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch_dir("cli");
    let bin = dir.join("service");
    std::fs::write(&bin, read_fixture("service.amd64.stripped.gz")).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o750)).unwrap();
    let original = std::fs::read(&bin).unwrap();
    let out = dir.join("service.sized");
    let mut args = apply_args(&bin, "32KiB", &out);
    args.extend([os("--godebug"), os("http2client=0,adaptivestackstart=1")]);
    let (code, stdout, stderr) = cli(&args);
    assert_eq!(code, 0, "{stderr}");
    eprint!("{stdout}");
    assert!(stdout.contains("goroutines start with 32.0 KiB instead of 2.0 KiB"));
    assert!(
        stdout.contains(&format!(
            "GODEBUG=http2client=0,adaptivestackstart=0,gcshrinkstackoff=1 {}",
            out.display()
        )),
        "{stdout}"
    );
    assert_eq!(std::fs::read(&bin).unwrap(), original, "the input changed");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&out), 0o750);
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");

    let (code, stdout, stderr) = cli(&[
        os("verify"),
        os("--binary"),
        out.as_os_str(),
        os("--godebug"),
        os(""),
    ]);
    assert_eq!(code, 0, "{stderr}");
    eprint!("{stdout}");
    assert!(stdout.contains("32.0 KiB (32768 B), applied"), "{stdout}");
    assert!(stdout.contains("recomputation   active"), "{stdout}");
    let (_, json, _) = cli(&[os("verify"), os("--binary"), out.as_os_str(), os("--json")]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["size"], 32768);
    assert_eq!(v["neutralised"], false);
    assert_eq!(v["found"], "code");

    // --no-adaptive: verify says the size holds without GODEBUG.
    let pinned = dir.join("service.pinned");
    let mut args = apply_args(&bin, "65536", &pinned);
    args.extend([os("--no-adaptive"), os("--godebug"), os("")]);
    let (code, stdout, stderr) = cli(&args);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("returns at its entry now"), "{stdout}");
    let (_, stdout, _) = cli(&[os("verify"), os("--binary"), pinned.as_os_str()]);
    assert!(stdout.contains("64.0 KiB (65536 B), applied"), "{stdout}");
    assert!(stdout.contains("recomputation   neutralised"), "{stdout}");
}

#[test]
fn from_profile_takes_the_recommendation() {
    let dir = scratch_dir("from-profile");
    let bin = fixture_binary("service.amd64");
    let profile = testdata().join("cpu.pprof");
    let out = dir.join("service.sized");
    let (code, stdout, stderr) = cli(&[
        os("apply"),
        os("--binary"),
        bin.as_os_str(),
        os("--from-profile"),
        profile.as_os_str(),
        os("-o"),
        out.as_os_str(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    eprint!("{stdout}");
    assert!(stdout.contains("64.0 KiB instead of 2.0 KiB (analyze's recommendation"));
    let i = inspect(&std::fs::read(&out).unwrap(), "sized from profile");
    assert_eq!(i.size, 65536);
}

#[test]
fn refuses_a_non_go_elf() {
    let me = std::env::current_exe().unwrap();
    let out = scratch_dir("non-go").join("out");
    expect_refusal(&apply_args(&me, "32KiB", &out), &me, "not a Go binary");
    expect_refusal(
        &[os("verify"), os("--binary"), me.as_os_str()],
        &me,
        "not a Go binary",
    );
    let text = scratch_file("not-elf.txt", b"#!/bin/sh\necho hi\n");
    expect_refusal(
        &apply_args(&text, "32KiB", &out),
        &text,
        "not an ELF executable",
    );
    assert!(!out.exists());
}

/// A copy of the stripped fixture with `from` replaced by `to` (same length) in its build
/// info.
fn with_build_info_edit(from: &[u8], to: &[u8], name: &str) -> PathBuf {
    assert_eq!(from.len(), to.len());
    let mut elf = read_fixture("service.amd64.stripped.gz");
    let magic = elf
        .windows(14)
        .position(|w| w == weft_gostack::buildinfo::MAGIC)
        .unwrap();
    let at = magic
        + elf[magic..magic + 4096]
            .windows(from.len())
            .position(|w| w == from)
            .unwrap_or_else(|| panic!("{} not in the build info", String::from_utf8_lossy(from)));
    elf[at..at + to.len()].copy_from_slice(to);
    scratch_file(name, &elf)
}

#[test]
fn refuses_an_unknown_go_version() {
    let out = scratch_dir("version").join("out");
    let bin = with_build_info_edit(b"go1.27.3", b"go1.99.3", "go1.99");
    expect_refusal(
        &apply_args(&bin, "32KiB", &out),
        &bin,
        "built by go1.99.3, a release apply has not been checked against",
    );
    let bin = with_build_info_edit(b"go1.27.3", b"go1.27rc", "go1.27rc");
    expect_refusal(&apply_args(&bin, "32KiB", &out), &bin, "a pre-release");
    // verify reads any version: it only reports.
    let (code, stdout, _) = cli(&[os("verify"), os("--binary"), bin.as_os_str()]);
    assert_eq!(code, 0);
    assert!(stdout.contains("go1.27rc"), "{stdout}");
    assert!(!out.exists());
}

#[test]
fn refuses_other_systems_and_architectures() {
    let out = scratch_dir("arch").join("out");
    let bin = with_build_info_edit(b"GOOS=linux", b"GOOS=aixxx", "goos");
    expect_refusal(
        &apply_args(&bin, "32KiB", &out),
        &bin,
        "built for GOOS=aixxx",
    );
    // e_machine 0xf3 (RISC-V) on an otherwise amd64 file.
    let mut elf = read_fixture("service.amd64.stripped.gz");
    elf[0x12..0x14].copy_from_slice(&0xf3u16.to_le_bytes());
    let bin = scratch_file("riscv", &elf);
    expect_refusal(
        &apply_args(&bin, "32KiB", &out),
        &bin,
        "amd64 and arm64 are supported",
    );
    assert!(!out.exists());
}

#[test]
fn refuses_a_value_other_than_2048() {
    let dir = scratch_dir("value");
    let bin = fixture_binary("service.amd64");
    let sized = dir.join("sized");
    let (code, _, stderr) = cli(&apply_args(&bin, "32KiB", &sized));
    assert_eq!(code, 0, "{stderr}");
    let again = dir.join("again");
    expect_refusal(
        &apply_args(&sized, "64KiB", &again),
        &sized,
        "is 32768 in the file, not 2048 (fixedStack)",
    );
    // Any other value, as a different runtime might hold.
    let mut data = read_fixture("service.amd64.gz");
    let i = inspect(&data, "service.amd64");
    data[i.var_offset as usize..][..4].copy_from_slice(&4000u32.to_le_bytes());
    let odd = scratch_file("value.4000", &data);
    expect_refusal(
        &apply_args(&odd, "32KiB", &again),
        &odd,
        "is 4000 in the file",
    );
    assert!(!again.exists());
}

#[test]
fn refuses_sizes_out_of_range() {
    let bin = fixture_binary("service.amd64");
    let out = scratch_dir("sizes").join("out");
    for (size, needle) in [
        ("30000", "size 30000 is not a power of two"),
        ("1KiB", "below fixedStack (2048)"),
        ("2GiB", "above 1 GiB"),
        ("32KB", "unknown unit"),
        ("big", "not a number of bytes"),
    ] {
        expect_refusal(&apply_args(&bin, size, &out), &bin, needle);
    }
    assert!(!out.exists());
}

#[test]
fn refuses_to_write_over_the_input() {
    let dir = scratch_dir("in-place");
    let bin = dir.join("service");
    std::fs::write(&bin, read_fixture("service.amd64.gz")).unwrap();
    let original = std::fs::read(&bin).unwrap();
    let sym = dir.join("service.link");
    std::os::unix::fs::symlink(&bin, &sym).unwrap();
    let hard = dir.join("service.hard");
    std::fs::hard_link(&bin, &hard).unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    let dotted = dir.join("sub/../service");
    for out in [&bin, &sym, &hard, &dotted] {
        expect_refusal(
            &apply_args(&bin, "32KiB", out),
            out,
            "apply writes a new file, never in place",
        );
    }
    // The input named through the link is refused the same way.
    expect_refusal(&apply_args(&sym, "32KiB", &hard), &hard, "never in place");
    // No -o at all.
    expect_refusal(
        &[
            os("apply"),
            os("--binary"),
            bin.as_os_str(),
            os("--size"),
            os("32KiB"),
        ],
        &bin,
        "no output file",
    );
    assert_eq!(std::fs::read(&bin).unwrap(), original, "the input changed");
}

/// The `.symtab` entry of `name`: its file offset.
fn symtab_entry(elf: &[u8], name: &str) -> usize {
    use object::{Object, ObjectSection};
    let f = object::File::parse(elf).unwrap();
    let (symtab, _) = f.section_by_name(".symtab").unwrap().file_range().unwrap();
    let (strtab, _) = f.section_by_name(".strtab").unwrap().file_range().unwrap();
    let size = f.section_by_name(".symtab").unwrap().size() as usize;
    (0..size / 24)
        .map(|k| symtab as usize + 24 * k)
        .find(|&e| {
            let off = u32::from_le_bytes(elf[e..e + 4].try_into().unwrap()) as usize;
            let s = &elf[strtab as usize + off..];
            &s[..s.iter().position(|&b| b == 0).unwrap()] == name.as_bytes()
        })
        .unwrap()
}

#[test]
fn refuses_when_symbol_and_code_disagree_or_the_code_is_unknown() {
    let out = scratch_dir("shape").join("out");
    let data = read_fixture("service.amd64.gz");
    let i = inspect(&data, "service.amd64");
    let mut elf = data.clone();
    let e = symtab_entry(&elf, apply::VAR);
    elf[e + 8..e + 16].copy_from_slice(&(i.var_address + 8).to_le_bytes());
    let bin = scratch_file("symbol-moved", &elf);
    expect_refusal(
        &apply_args(&bin, "32KiB", &out),
        &bin,
        "not sure which to patch",
    );

    // The constant store of 2048 made a store of 2049.
    let mut elf = data.clone();
    let f = i.func_offset as usize;
    let at = f + elf[f..f + 256]
        .windows(6)
        .position(|w| w[0] == 0xc7 && w[1] == 0x05)
        .unwrap();
    assert_eq!(elf[at + 6..at + 10], 2048u32.to_le_bytes());
    elf[at + 6] = 1;
    let bin = scratch_file("code-changed", &elf);
    expect_refusal(&apply_args(&bin, "32KiB", &out), &bin, "no store of 2048");
    assert!(!out.exists());
}

#[test]
fn print_build_flags_keeps_the_module_default_godebug() {
    let bin = fixture_binary("service.amd64");
    let (code, stdout, stderr) = cli(&[
        os("apply"),
        os("--print-build-flags"),
        os("--binary"),
        bin.as_os_str(),
        os("--size"),
        os("32KiB"),
    ]);
    assert_eq!(code, 0, "{stderr}");
    eprint!("{stdout}");
    let default = String::from_utf8_lossy(&read_fixture("service.amd64.gz")).contains("panicnil=1");
    assert!(
        default,
        "the fixture's module (go 1.18) has DefaultGODEBUG panicnil=1"
    );
    assert!(stdout.contains("//go:linkname startingStackSize runtime.startingStackSize"));
    assert!(stdout.contains("func init() { startingStackSize = 32768 }"));
    let flags = stdout
        .lines()
        .find_map(|l| l.strip_prefix("go build -ldflags="))
        .unwrap();
    assert!(
        flags.starts_with("'-checklinkname=0 -X=runtime.godebugDefault="),
        "{flags}"
    );
    assert!(flags.contains("panicnil=1,"), "{flags}");
    assert!(
        flags.ends_with(",adaptivestackstart=0,gcshrinkstackoff=1' ."),
        "{flags}"
    );
    expect_refusal(
        &[
            os("apply"),
            os("--print-build-flags"),
            os("--size"),
            os("32KiB"),
        ],
        Path::new("--print-build-flags"),
        "give --binary APP (its build info) or --module DIR",
    );
}

// ---- with a Go toolchain ---------------------------------------------------------------

/// What the stackstart test program printed.
#[derive(Debug)]
struct Run {
    goroutines: u64,
    grew: u64,
    starting_size: u64,
}

/// How to run a binary of `arch` here: natively, under `qemu-aarch64`, or not at all.
fn runner(arch: &str, pie: bool) -> Result<Vec<String>, String> {
    let host = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    if arch == host {
        return Ok(Vec::new());
    }
    if arch != "arm64" {
        return Err(format!("no way to run {arch} binaries here"));
    }
    let qemu = Command::new("qemu-aarch64").arg("--version").output();
    if !qemu.is_ok_and(|o| o.status.success()) {
        return Err("no qemu-aarch64 (Debian's qemu-user) to run arm64 binaries".into());
    }
    let mut cmd = vec!["qemu-aarch64".to_string()];
    if pie {
        // A PIE build is dynamically linked: it needs an arm64 loader (libc6-arm64-cross).
        let prefix = "/usr/aarch64-linux-gnu";
        if !Path::new(prefix).join("lib/ld-linux-aarch64.so.1").exists() {
            return Err(format!(
                "no arm64 loader under {prefix} (libc6-arm64-cross)"
            ));
        }
        cmd.extend(["-L".into(), prefix.into()]);
    }
    Ok(cmd)
}

fn run_stackstart(prefix: &[String], bin: &Path, godebug: &str) -> Run {
    let mut cmd = match prefix.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    let out = cmd
        .env("GODEBUG", godebug)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{} failed: {}",
        bin.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Run {
        goroutines: service_value(&stdout, "goroutines"),
        grew: service_value(&stdout, "grew"),
        starting_size: service_value(&stdout, "starting_size"),
    }
}

/// Builds the stackstart program for amd64 and arm64, plain, stripped and PIE, with every
/// toolchain (`GOSTACK_EXTRA_GO` adds more), applies 32 KiB with and without
/// `--no-adaptive`, and runs what this machine can run: the original grows every
/// goroutine's stack, the sized copy with the printed GODEBUG and the neutralised copy with
/// none grow (almost) none, and the sized copy without GODEBUG falls back at the first GC.
#[test]
fn applied_builds_start_goroutines_with_the_size() {
    let test = "applied_builds_start_goroutines_with_the_size";
    let Some(go) = go_or_skip(test) else {
        return;
    };
    let src = testdata().join("stackstart");
    let env = godebug::merge("", &godebug::RUN_SETTINGS);
    for (n, (go, version)) in go_toolchains(go).iter().enumerate() {
        for arch in ["amd64", "arm64"] {
            for (mode, flags) in [
                ("plain", &["-ldflags=-w"][..]),
                ("stripped", &["-ldflags=-s -w"][..]),
                ("pie", &["-buildmode=pie"][..]),
            ] {
                let label = format!("{version} {arch} {mode}");
                let bin = go_build_dir(
                    go,
                    &src,
                    &format!("stackstart.{n}.{arch}.{mode}"),
                    arch,
                    flags,
                );
                let data = std::fs::read(&bin).unwrap();
                let sized =
                    apply::apply(&data, SIZE, false).unwrap_or_else(|e| panic!("{label}: {e}"));
                let pinned = apply::apply(&data, SIZE, true)
                    .unwrap_or_else(|e| panic!("{label} --no-adaptive: {e}"));
                assert_eq!(
                    sized.before.found == Found::Code,
                    mode == "stripped",
                    "{label}"
                );
                let sized_path = bin.with_extension("sized");
                let pinned_path = bin.with_extension("pinned");
                apply::write_new(&bin, &sized_path, &sized.bytes).unwrap();
                apply::write_new(&bin, &pinned_path, &pinned.bytes).unwrap();
                let prefix = match runner(arch, mode == "pie") {
                    Ok(p) => p,
                    Err(why) => {
                        skip(
                            &format!("{test} ({label}: patched and read back)"),
                            &format!("not run: {why}"),
                        );
                        continue;
                    }
                };
                let original = run_stackstart(&prefix, &bin, "adaptivestackstart=0");
                let with_env = run_stackstart(&prefix, &sized_path, &env);
                let without_env = run_stackstart(&prefix, &sized_path, "");
                let neutralised = run_stackstart(&prefix, &pinned_path, "");
                eprintln!(
                    "{label}: grew/goroutines original {}/{}, sized + GODEBUG {}/{} (start {}), \
                     sized without GODEBUG start {} after GCs, --no-adaptive {}/{} (start {})",
                    original.grew,
                    original.goroutines,
                    with_env.grew,
                    with_env.goroutines,
                    with_env.starting_size,
                    without_env.starting_size,
                    neutralised.grew,
                    neutralised.goroutines,
                    neutralised.starting_size
                );
                assert!(
                    original.grew * 10 >= original.goroutines * 9,
                    "{label}: {original:?}"
                );
                assert_eq!(original.starting_size, 2048, "{label}");
                for r in [&with_env, &neutralised] {
                    assert_eq!(r.starting_size, SIZE, "{label}: {r:?}");
                    assert!(r.grew * 10 <= r.goroutines, "{label}: {r:?}");
                }
                assert_ne!(without_env.starting_size, SIZE, "{label}: {without_env:?}");
            }
        }
    }
}

/// The rebuild route: the printed Go file and `-ldflags` (from `go list` in the module)
/// give a binary whose goroutines start at the size with no GODEBUG, and that still holds
/// the module's default GODEBUG.
#[test]
fn build_flag_route_starts_goroutines_with_the_size() {
    let test = "build_flag_route_starts_goroutines_with_the_size";
    let Some(go) = go_or_skip(test) else {
        return;
    };
    if std::env::consts::ARCH != "x86_64" {
        skip(test, "runs amd64 builds on x86_64 hosts only");
        return;
    }
    let dir = scratch_dir("build-flags");
    for f in ["main.go", "go.mod"] {
        std::fs::copy(testdata().join("stackstart").join(f), dir.join(f)).unwrap();
    }
    let (code, stdout, stderr) = cli(&[
        os("apply"),
        os("--print-build-flags"),
        os("--module"),
        dir.as_os_str(),
        os("--go"),
        go.as_os_str(),
        os("--size"),
        os("32KiB"),
    ]);
    assert_eq!(code, 0, "{stderr}");
    eprint!("{stdout}");
    // The Go file is the text between the two numbered comments.
    let file: String = stdout
        .lines()
        .skip_while(|l| !l.starts_with("# 1."))
        .skip(1)
        .take_while(|l| !l.starts_with("# 2."))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(dir.join("stackstart.go"), &file).unwrap();
    let flags = stdout
        .lines()
        .find_map(|l| l.strip_prefix("go build -ldflags='"))
        .and_then(|l| l.strip_suffix("' ."))
        .unwrap()
        .to_string();
    let bin = go_build_dir(
        &go,
        &dir,
        "stackstart.rebuilt",
        "amd64",
        &[&format!("-ldflags={flags}")],
    );
    let r = run_stackstart(&[], &bin, "");
    eprintln!("rebuilt with the printed flags: {r:?}");
    assert_eq!(r.starting_size, SIZE, "{r:?}");
    assert!(r.grew * 20 <= r.goroutines, "{r:?}");
    let merged = flags.split_once("godebugDefault=").unwrap().1;
    let data = std::fs::read(&bin).unwrap();
    assert!(
        data.windows(merged.len()).any(|w| w == merged.as_bytes()),
        "the binary does not hold the merged default GODEBUG {merged}"
    );
    let i = inspect(&data, "rebuilt");
    assert_eq!(
        i.size, 2048,
        "the rebuilt file keeps 2048; its init sets the size"
    );
}
