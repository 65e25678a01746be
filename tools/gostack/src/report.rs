//! Rendering: text for people, JSON for machines.
//!
//! This module owns every byte the commands print on stdout. The `frames` and `analyze`
//! text names no file paths, section names or build IDs, so the same inputs give the same
//! report whether the binary is stripped, PIE or neither; `apply` and `verify` name the
//! file, the address and the section they read or wrote, which is their point.

use crate::analyze::{Analysis, Chain, Share};
use crate::apply::{Applied, Found, Inspection, FIXED_STACK, FUNC, VAR};
use crate::binary::GoBinary;
use crate::godebug;
use serde::Serialize;
use std::fmt::Write;

/// Bytes as `N B` or `N.N KiB`/`MiB`.
pub fn bytes(n: u64) -> String {
    if n < 1024 {
        format!("{n} B")
    } else if n < 1024 * 1024 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", n as f64 / (1024.0 * 1024.0))
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

#[derive(Serialize)]
struct FramesJson<'a> {
    go_version: String,
    arch: &'static str,
    functions: usize,
    frames: Vec<FrameRow<'a>>,
}

/// One `frames` row: the entry tells apart functions that share a name (an ABI wrapper
/// carries the name of the function it wraps).
#[derive(Serialize)]
struct FrameRow<'a> {
    name: &'a str,
    frame: u32,
    sp_delta_max: u32,
    /// Entry address: the text start plus the offset, `null` when the file does not say
    /// where the text starts (a header-less build).
    entry: Option<u64>,
    /// Entry as an offset from the text start.
    entry_offset: u32,
    /// Generated code (ABI or method wrapper, hash/equality function) by its `funcID`.
    wrapper: bool,
}

/// The entry as text: the address when the text start is known, else `text+offset`.
fn entry_text(b: &GoBinary, f: &crate::binary::FuncFrame) -> String {
    match b.text_start {
        0 => format!("text+{:#x}", f.entry),
        t => format!("{:#x}", t + u64::from(f.entry)),
    }
}

/// The `frames` command's output: functions by frame size, largest first.
pub fn frames(b: &GoBinary, top: Option<usize>, json: bool) -> String {
    let mut fs: Vec<_> = b.funcs.iter().collect();
    fs.sort_by(|x, y| {
        y.frame
            .cmp(&x.frame)
            .then_with(|| x.name.cmp(&y.name))
            .then_with(|| x.entry.cmp(&y.entry))
    });
    fs.truncate(top.unwrap_or(usize::MAX));
    if json {
        let j = FramesJson {
            go_version: b.version_label(),
            arch: b.arch.name(),
            functions: b.funcs.len(),
            frames: fs
                .iter()
                .map(|f| FrameRow {
                    name: &f.name,
                    frame: f.frame,
                    sp_delta_max: f.sp_delta_max,
                    entry: (b.text_start != 0).then(|| b.text_start + u64::from(f.entry)),
                    entry_offset: f.entry,
                    wrapper: f.wrapper,
                })
                .collect(),
        };
        return serde_json::to_string_pretty(&j).unwrap_or_default() + "\n";
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} {}: {} functions; frame = largest pcsp SP delta{}; [wrapper] = generated code \
         (an ABI wrapper has the name of the function it wraps)",
        b.version_label(),
        b.arch.name(),
        b.funcs.len(),
        if b.arch.return_address_size() > 0 {
            " + return address"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "{:>10} {:>10} {:>18}  function",
        "frame", "sp-delta", "entry"
    );
    for f in fs {
        let _ = writeln!(
            out,
            "{:>10} {:>10} {:>18}  {}{}",
            f.frame,
            f.sp_delta_max,
            entry_text(b, f),
            f.name,
            if f.wrapper { " [wrapper]" } else { "" }
        );
    }
    out
}

fn amount(v: i64, unit: &str) -> String {
    if unit.ends_with("nanoseconds") {
        format!("{:.2} s", v as f64 / 1e9)
    } else {
        format!("{v} {}", unit.rsplit(' ').next().unwrap_or(""))
    }
}

fn share_line(label: &str, s: &Share, unit: &str, what: &str) -> String {
    format!(
        "{label:<13}{:>6} of CPU ({}, {} samples)  {what}\n",
        pct(s.share),
        amount(s.value, unit),
        s.samples
    )
}

/// A chain as `f ← g×3 ← h`.
pub fn chain_path(c: &Chain) -> String {
    c.stack
        .iter()
        .map(|f| {
            let mut s = f.function.clone();
            if f.inlined {
                s.push_str(" (inlined)");
            }
            if f.repeat > 1 {
                let _ = write!(s, "×{}", f.repeat);
            }
            s
        })
        .collect::<Vec<_>>()
        .join(" ← ")
}

/// The `analyze` command's output.
pub fn analysis(a: &Analysis, top: usize, json: bool) -> String {
    if json {
        return serde_json::to_string_pretty(a).unwrap_or_default() + "\n";
    }
    let i = &a.inputs;
    let unit = &i.sample_type;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "binary   {} {}, {} functions",
        i.go_version,
        i.arch.name(),
        i.functions
    );
    let _ = writeln!(
        out,
        "profile  {}, {:.2} s, {} samples, {} in all\n",
        unit,
        i.duration_seconds,
        i.samples,
        amount(i.total_value, unit)
    );
    out += &share_line(
        "stack growth",
        &a.growth,
        unit,
        "morestack/newstack/copystack and below",
    );
    out += &share_line("stack shrink", &a.shrink, unit, "shrinkstack and below");
    if a.preempt.samples > 0 {
        out += &share_line(
            "preemption",
            &a.preempt,
            unit,
            "newstack entered to preempt (gopreempt_m/preemptPark), not growth",
        );
    }
    let (Some(d), Some(r)) = (a.need, a.recommendation) else {
        out += "\nno sample reached stack growth: nothing to recommend\n";
        return out;
    };
    let _ = writeln!(
        out,
        "\nstack need per growth sample (start reserve {} + frames + guard {}), weighted by CPU:",
        bytes(a.start_reserve.into()),
        bytes(a.guard.into())
    );
    let _ = writeln!(
        out,
        "  p50 {}  p90 {}  p99 {}  max {}",
        bytes(d.p50),
        bytes(d.p90),
        bytes(d.p99),
        bytes(d.max)
    );
    let _ = writeln!(
        out,
        "\nrecommended starting stack: {}\n  covers {} of growth samples (need {} = {} B there); \
         removes {} of growth CPU = {} of all CPU",
        bytes(r.size),
        pct(r.coverage),
        bytes(r.need_at_coverage),
        r.need_at_coverage,
        pct(r.removes_growth_share),
        pct(r.removes_total_share)
    );
    let _ = writeln!(
        out,
        "\nchains that reached growth: {} ({} cut short by the profiler's depth limit), top {} by CPU:",
        a.chains.len(),
        a.truncated_chains,
        top.min(a.chains.len())
    );
    let _ = writeln!(
        out,
        "{:>8} {:>8} {:>9} {:>6}  chain (growing function first)",
        "growth%", "samples", "need B", "depth"
    );
    for c in a.chains.iter().take(top) {
        let _ = writeln!(
            out,
            "{:>8} {:>8} {:>9} {:>6}  {}{}",
            pct(c.growth.share),
            c.growth.samples,
            c.need,
            c.depth,
            if c.truncated { "[cut] " } else { "" },
            chain_path(c)
        );
    }
    let _ = writeln!(out, "\nstack hogs on growth chains (largest frames first):");
    let _ = writeln!(
        out,
        "{:>9} {:>6} {:>8}  function",
        "frame B", "max×", "growth%"
    );
    for h in a.hogs.iter().take(top) {
        let _ = writeln!(
            out,
            "{:>9} {:>6} {:>8}  {}",
            h.frame,
            h.max_repeat,
            pct(h.growth.share),
            h.function
        );
    }
    out
}

/// How a sized binary is to be run: the GODEBUG it needs, merged into `existing` (the
/// service's own GODEBUG), and the command line.
pub fn run_line(i: &Inspection, existing: &str, program: &str) -> String {
    let needs: &[(&str, &str)] = if i.neutralised {
        &godebug::RUN_SETTINGS[1..]
    } else {
        &godebug::RUN_SETTINGS
    };
    format!(
        "GODEBUG={} {}",
        godebug::shell_quote(&godebug::merge(existing, needs)),
        godebug::shell_quote(program)
    )
}

fn site(i: &Inspection) -> String {
    format!(
        "{VAR} at {:#x} (file offset {:#x}{}), found by {}; {} store{} to it in {FUNC}",
        i.var_address,
        i.var_offset,
        i.var_section
            .as_ref()
            .map_or(String::new(), |s| format!(", {s}")),
        match i.found {
            Found::SymbolAndCode => "the code, and the symbol agrees",
            Found::Code => "the code (no symbol table)",
        },
        i.stores,
        if i.stores == 1 { "" } else { "s" }
    )
}

/// The `apply` command's output: what was written and how to run it.
pub fn applied(a: &Applied, output: &str, existing_godebug: &str, from: &str) -> String {
    let mut out = String::new();
    let (b, n) = (&a.before, &a.after);
    let _ = writeln!(
        out,
        "wrote {output}: goroutines start with {} instead of {} ({})",
        bytes(n.size.into()),
        bytes(b.size.into()),
        from
    );
    let _ = writeln!(out, "  {} {}; {}", b.go_version, b.arch.name(), site(b));
    if n.neutralised {
        let _ = writeln!(
            out,
            "  {FUNC} returns at its entry now ({:#x}, file offset {:#x}): the GC no longer \
             recomputes the size, and the /gc/stack/starting-size:bytes metric stays at {}",
            n.func_address, n.func_offset, n.size
        );
    }
    let program = if output.contains('/') {
        output.to_string()
    } else {
        format!("./{output}")
    };
    let _ = writeln!(
        out,
        "run it with:\n  {}",
        run_line(n, existing_godebug, &program)
    );
    if n.neutralised {
        out += "  (the size holds without GODEBUG; gcshrinkstackoff=1 also keeps the GC from \
                halving stacks that reused goroutines would grow again)\n";
    } else {
        out += "  (without adaptivestackstart=0 the runtime resets the size at the first GC; \
                apply --no-adaptive removes that need)\n";
    }
    let _ = writeln!(
        out,
        "the input is untouched; check the copy with: weft-gostack verify --binary {}",
        godebug::shell_quote(output)
    );
    out
}

/// The `verify` command's output.
pub fn verified(i: &Inspection, existing_godebug: &str, program: &str, json: bool) -> String {
    if json {
        return serde_json::to_string_pretty(i).unwrap_or_default() + "\n";
    }
    let mut out = String::new();
    let state = if i.size == FIXED_STACK {
        "the runtime's default: not applied"
    } else {
        "applied"
    };
    let _ = writeln!(out, "binary          {} {}", i.go_version, i.arch.name());
    let _ = writeln!(
        out,
        "starting stack  {} ({} B), {state}",
        bytes(i.size.into()),
        i.size
    );
    let _ = writeln!(out, "                {}", site(i));
    if i.neutralised {
        let _ = writeln!(
            out,
            "recomputation   neutralised: {FUNC} returns at its entry, the size holds \
             without GODEBUG"
        );
    } else {
        let _ = writeln!(
            out,
            "recomputation   active: the GC rewrites the size unless the program runs with \
             adaptivestackstart=0"
        );
    }
    if i.size != FIXED_STACK {
        let _ = writeln!(
            out,
            "run it with     {}",
            run_line(i, existing_godebug, program)
        );
    }
    out
}

/// The Go file that sets the starting stack in a rebuilt program (the build-flag route).
pub fn go_file(size: u64) -> String {
    format!(
        "package main\n\
         \n\
         import _ \"unsafe\" // for go:linkname\n\
         \n\
         // startingStackSize is the Go runtime's starting goroutine stack size\n\
         // (runtime/stack.go), set by weft-gostack apply --print-build-flags. Building\n\
         // this file needs -ldflags=-checklinkname=0.\n\
         //\n\
         //go:linkname startingStackSize runtime.startingStackSize\n\
         var startingStackSize uint32\n\
         \n\
         func init() {{ startingStackSize = {size} }}\n"
    )
}

/// The `-ldflags` value of the build-flag route: the module's default GODEBUG with the run
/// settings merged in, baked into the runtime's default; `-checklinkname=0` lets the
/// linker accept the Go file's `//go:linkname` (Go 1.23 and later check them; older
/// linkers do not know the flag).
pub fn ldflags(default_godebug: &str, go_version: &str) -> String {
    let minor = go_version
        .strip_prefix("go1.")
        .map(|r| {
            r.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .and_then(|m| m.parse::<u32>().ok());
    let check = if minor.is_some_and(|m| m < 23) {
        ""
    } else {
        "-checklinkname=0 "
    };
    format!(
        "{check}-X=runtime.godebugDefault={}",
        godebug::merge(default_godebug, &godebug::RUN_SETTINGS)
    )
}

/// The `apply --print-build-flags` output.
pub fn build_flags(size: u64, default_godebug: &str, go_version: &str, source: &str) -> String {
    format!(
        "# Rebuild instead of patching: goroutines start with {} ({size} B).\n\
         # 1. Add this file to the main package, as stackstart.go:\n\
         {}\
         # 2. Build with these flags ({go_version}; the module's default GODEBUG, from {source},\n\
         #    is kept: -X replaces it; if the build already passes -ldflags, add them to it):\n\
         go build -ldflags={} .\n",
        bytes(size),
        go_file(size),
        godebug::shell_quote(&ldflags(default_godebug, go_version))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_bytes() {
        assert_eq!(bytes(928), "928 B");
        assert_eq!(bytes(32768), "32.0 KiB");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
    }
}
