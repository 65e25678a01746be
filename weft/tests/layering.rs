//! The layering check: every `crate::` path in `weft/src` names the module's own layer or one
//! below it, as the crate doc's "Layers" list (weft/src/lib.rs) orders them, so no import
//! cycle spans more than one layer folder.
//!
//! A layer is a folder of `src/` (`sched/`, `stack/`, …) or a file beside `lib.rs`
//! (`context.rs`, `loom.rs`). Each `crate::` and `$crate::` path counts: `use` lines with their
//! `{…}` groups, paths written inline, and paths in `#[cfg(test)]` code (a layer's tests build
//! with it); comments and string literals do not. A path through a root re-export
//! (`crate::spawn`, `crate::Handle`) counts as the module it re-exports, a `#[macro_export]`
//! macro as the file that defines it, a `#[path]` module of lib.rs (`chan_core`) as the folder
//! of its file, and a `super::` chain that leaves its layer folder as the crate root's next
//! segment. `lib.rs` and `src/tests/` (the loom models) may name every layer.
//!
//! `WEFT_LAYERS_SRC=/path/to/weft/src` checks another tree against this tree's list (how the
//! upward imports of an older tree were counted).
//!
//! May call: std only. Called by: `cargo test` (CI, scripts/test.sh).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The layers, bottom first, as lib.rs lists them top first.
struct Layers {
    order: Vec<String>,
}

impl Layers {
    /// Reads the first ```text block after the `# Layers` heading of `lib_rs`: each line whose
    /// first word is a lower-case identifier names a layer; the top line is the top layer.
    fn from_crate_doc(lib_rs: &str) -> Layers {
        let mut lines = lib_rs
            .lines()
            .map(|l| l.trim_start().trim_start_matches("//!").trim())
            .skip_while(|l| *l != "# Layers")
            .skip_while(|l| !l.starts_with("```text"))
            .skip(1);
        let mut order = Vec::new();
        for line in lines.by_ref() {
            if line.starts_with("```") {
                break;
            }
            let Some(word) = line.split_whitespace().next() else {
                continue;
            };
            if word.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                order.push(word.to_string());
            }
        }
        assert!(
            !order.is_empty(),
            "layering: lib.rs has no \"# Layers\" heading followed by a text block of layers"
        );
        order.reverse();
        Layers { order }
    }

    fn rank(&self, layer: &str) -> Option<usize> {
        self.order.iter().position(|l| l == layer)
    }
}

/// The layers that may name every other: the crate root and the loom models.
const UNRESTRICTED: [&str; 2] = ["lib", "tests"];

/// One path that names a layer above its own.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Violation {
    file: String,
    line: usize,
    from: String,
    to: String,
}

/// The sources of one tree: path relative to `src/` (with `/`) → text.
type Sources = BTreeMap<String, String>;

fn read_tree(root: &Path) -> Sources {
    fn walk(root: &Path, dir: &Path, out: &mut Sources) {
        let mut entries: Vec<PathBuf> = fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("layering: {}: {e}", dir.display()))
            .map(|e| e.expect("layering: a directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(root).expect("under the root");
                let rel = rel.to_string_lossy().replace('\\', "/");
                let text = fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("layering: {}: {e}", path.display()));
                out.insert(rel, text);
            }
        }
    }
    let mut out = Sources::new();
    walk(root, root, &mut out);
    out
}

/// The layer a file belongs to: its first folder, or its stem beside lib.rs.
fn layer_of(file: &str) -> String {
    match file.split_once('/') {
        Some((folder, _)) => folder.to_string(),
        None => file.trim_end_matches(".rs").to_string(),
    }
}

/// Blanks comments and the contents of string and character literals (keeping line breaks),
/// so that only code is searched for paths.
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let blank = |out: &mut String, bytes: &[u8]| {
        for &c in bytes {
            out.push(if c == b'\n' { '\n' } else { ' ' });
        }
    };
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            let mut j = 0;
            while j < rest.len() {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &rest[..j]);
            i += j;
        } else if let Some(len) = raw_string_len(rest) {
            blank(&mut out, &rest[..len]);
            i += len;
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'\'' {
            // A character literal ('a', '\n', '\u{1F600}'), not a lifetime ('a).
            let len = if rest.get(1) == Some(&b'\\') {
                rest.iter().skip(2).position(|&c| c == b'\'').map(|p| p + 3)
            } else {
                let ch = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                (rest.get(1 + ch) == Some(&b'\'')).then_some(2 + ch)
            };
            match len {
                Some(len) => {
                    blank(&mut out, &rest[..len]);
                    i += len;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let ch = src[i..].chars().next().expect("in bounds");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// The length of a raw string literal (`r"…"`, `r#"…"#`, `br"…"`) at the start of `rest`.
fn raw_string_len(rest: &[u8]) -> Option<usize> {
    let start = if rest.starts_with(b"br") {
        2
    } else if rest.starts_with(b"r") {
        1
    } else {
        return None;
    };
    let hashes = rest[start..].iter().take_while(|&&c| c == b'#').count();
    if rest.get(start + hashes) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let body = start + hashes + 1;
    let end = rest[body..]
        .windows(close.len())
        .position(|w| w == close.as_slice())?;
    Some(body + end + close.len())
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn ident_at(s: &[u8], mut i: usize) -> (Option<String>, usize) {
    while i < s.len() && s[i].is_ascii_whitespace() {
        i += 1;
    }
    let start = i;
    while i < s.len() && is_ident(s[i]) {
        i += 1;
    }
    let word = (i > start).then(|| String::from_utf8_lossy(&s[start..i]).into_owned());
    (word, i)
}

/// The first segments a path names right after `crate::` at `i`: one word, or each element
/// of a `{…}` group.
fn first_segments(s: &[u8], i: usize) -> Vec<String> {
    let mut j = i;
    while j < s.len() && s[j].is_ascii_whitespace() {
        j += 1;
    }
    if s.get(j) != Some(&b'{') {
        return ident_at(s, j).0.into_iter().collect();
    }
    let mut out = Vec::new();
    let (mut depth, mut at_element) = (0usize, true);
    while j < s.len() {
        match s[j] {
            b'{' => {
                depth += 1;
                at_element = depth == 1;
            }
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            b',' if depth == 1 => at_element = true,
            c if at_element && depth == 1 && is_ident(c) => {
                let (word, end) = ident_at(s, j);
                out.extend(word);
                at_element = false;
                j = end;
                continue;
            }
            _ => {}
        }
        j += 1;
    }
    out
}

/// Every (line, first segment) a file names through `crate::`, `$crate::` or a `super::`
/// chain that climbs out of the file's layer folder.
fn named_from(file: &str, src: &str) -> Vec<(usize, String)> {
    let code = strip(src);
    let s = code.as_bytes();
    // How deep the file's module sits below its layer's own module (`sched/mod.rs` 0,
    // `sched/worker.rs` 1, `debug/trace/json.rs` 2), and the inline `mod x {` blocks open
    // at each point (a `super::` in one of them climbs out of it first).
    let parts: Vec<&str> = file.split('/').collect();
    let file_depth = match parts.last() {
        Some(&"mod.rs") => parts.len().saturating_sub(2),
        _ => parts.len().saturating_sub(1),
    };
    let mut mods: Vec<usize> = Vec::new(); // brace depths where inline modules opened
    let mut depth = 0usize;
    let mut pending_mod = false;
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        let prev_ident = i > 0 && is_ident(s[i - 1]);
        if c == b'\n' {
            line += 1;
        } else if c == b'{' {
            depth += 1;
            if pending_mod {
                mods.push(depth);
                pending_mod = false;
            }
        } else if c == b'}' {
            if mods.last() == Some(&depth) {
                mods.pop();
            }
            depth = depth.saturating_sub(1);
        } else if c == b';' {
            pending_mod = false;
        } else if !prev_ident
            && s[i..].starts_with(b"mod")
            && !s.get(i + 3).is_some_and(|&c| is_ident(c))
        {
            pending_mod = true;
        } else if !prev_ident && s[i..].starts_with(b"crate::") && (i == 0 || s[i - 1] != b':') {
            for segment in first_segments(s, i + 7) {
                out.push((line, segment));
            }
            i += 7;
            continue;
        } else if !prev_ident && s[i..].starts_with(b"super::") && (i == 0 || s[i - 1] != b':') {
            let mut climbs = 0usize;
            let mut j = i;
            while s[j..].starts_with(b"super::") {
                climbs += 1;
                j += 7;
                while j < s.len() && s[j].is_ascii_whitespace() {
                    j += 1;
                }
            }
            let climbs = climbs.saturating_sub(mods.len());
            if climbs > file_depth && climbs == file_depth + 1 {
                for segment in first_segments(s, j) {
                    out.push((line, segment));
                }
            }
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

/// Where root paths lead: `crate::X` for an `X` that lib.rs re-exports from a module, a
/// `#[path]` module of lib.rs, or a `#[macro_export]` macro, → the layer that defines it.
fn aliases(sources: &Sources) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (file, src) in sources {
        let code = strip(src);
        let mut words = code.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '!'));
        while let Some(word) = words.next() {
            if word == "macro_rules!" {
                if let Some(name) = words.find(|w| !w.is_empty()) {
                    out.insert(name.to_string(), layer_of(file));
                }
            }
        }
    }
    let lib = sources.get("lib.rs").map(String::as_str).unwrap_or("");
    let mut path_attr: Option<String> = None;
    for line in lib.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("#[path = \"") {
            path_attr = rest.split('"').next().map(str::to_string);
            continue;
        }
        if let Some(path) = path_attr.take().filter(|_| line.contains("mod ")) {
            let name = line
                .trim_end_matches(';')
                .rsplit(' ')
                .next()
                .unwrap_or_default();
            out.insert(name.to_string(), layer_of(&path));
        }
        if let Some(rest) = line.strip_prefix("pub use ") {
            let (module, items) = rest.split_once("::").unwrap_or((rest, ""));
            for item in items
                .trim_matches(|c| c == '{' || c == '}' || c == ';')
                .split(',')
                .map(|i| {
                    i.trim_matches(|c: char| c == '{' || c == '}' || c == ';' || c.is_whitespace())
                })
                .filter(|i| !i.is_empty())
            {
                out.insert(item.to_string(), module.to_string());
            }
        }
    }
    out
}

/// Every path of `sources` that names a layer above its own, and every file whose layer
/// the list lacks.
fn check(layers: &Layers, sources: &Sources) -> (Vec<Violation>, BTreeSet<String>) {
    let aliases = aliases(sources);
    let mut violations = Vec::new();
    let mut unlisted = BTreeSet::new();
    for (file, src) in sources {
        let from = layer_of(file);
        if UNRESTRICTED.contains(&from.as_str()) {
            continue;
        }
        let Some(from_rank) = layers.rank(&from) else {
            unlisted.insert(from);
            continue;
        };
        for (line, segment) in named_from(file, src) {
            let to = match aliases.get(&segment) {
                Some(layer) => layer.clone(),
                None if layers.rank(&segment).is_some() => segment,
                // An item of the crate root itself (`crate::run`), or a name the list lacks.
                None => format!("lib ({segment})"),
            };
            let allowed = layers.rank(&to).is_some_and(|r| r <= from_rank);
            if !allowed {
                violations.push(Violation {
                    file: file.clone(),
                    line,
                    from: from.clone(),
                    to,
                });
            }
        }
    }
    violations.sort();
    (violations, unlisted)
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn every_crate_path_names_its_own_layer_or_one_below() {
    let own = read_tree(&src_dir());
    let layers = Layers::from_crate_doc(&own["lib.rs"]);
    let checked = match std::env::var_os("WEFT_LAYERS_SRC") {
        Some(dir) => read_tree(Path::new(&dir)),
        None => own,
    };
    let (violations, unlisted) = check(&layers, &checked);
    let mut report = String::new();
    for v in &violations {
        report.push_str(&format!(
            "  {}:{}: `{}` names `{}`, which is not below it\n",
            v.file, v.line, v.from, v.to
        ));
    }
    let files: BTreeSet<&str> = violations.iter().map(|v| v.file.as_str()).collect();
    let imports: BTreeSet<(&str, &str)> = violations
        .iter()
        .map(|v| (v.file.as_str(), v.to.as_str()))
        .collect();
    let edges: BTreeSet<(&str, &str)> = violations
        .iter()
        .map(|v| (v.from.as_str(), v.to.as_str()))
        .collect();
    assert!(
        violations.is_empty() && unlisted.is_empty(),
        "layering: {} paths in {} files ({} file-to-layer imports, {} layer-to-layer edges) \
         name a layer that is not below their own (weft/src/lib.rs, \"Layers\", top first: \
         {}):\n{report}layers missing from that list: {unlisted:?}",
        violations.len(),
        files.len(),
        imports.len(),
        edges.len(),
        layers
            .order
            .iter()
            .rev()
            .cloned()
            .collect::<Vec<_>>()
            .join(", "),
    );
}

/// The check itself: upward paths of every form are caught, downward ones and text that only
/// looks like a path are not.
#[test]
fn upward_paths_of_every_form_are_caught() {
    let layers = Layers::from_crate_doc(
        "//! # Layers\n//! ```text\n//!   debug   observers\n//!   sched   workers\n\
         //!   stack   slots\n//! ```\n",
    );
    let mut sources = Sources::new();
    let mut add = |file: &str, text: &str| sources.insert(file.to_string(), text.to_string());
    add(
        "lib.rs",
        "#[path = \"debug/cap.rs\"]\nmod debug_cap;\npub use sched::{Runtime, Handle};\n",
    );
    add(
        "debug/mod.rs",
        "use crate::sched::Runtime;\nuse crate::stack;\n",
    );
    add("debug/cap.rs", "macro_rules! dump { () => {} }\n");
    add(
        "sched/worker.rs",
        "use crate::debug::{trace, ParkSite};\n\
         use crate::{stack::Slot, debug::record};\n\
         fn f() { crate::debug::record(); let s = \"crate::debug::x\"; }\n\
         // crate::debug::in_a_comment\n\
         /* crate::debug::in_a_block */ fn g<'a>(x: &'a u8) -> char { let _ = x; 'c' }\n\
         fn h() { crate::dump!(); crate::debug_cap::f(); crate::stack::g(); crate::Runtime::new(); }\n",
    );
    add(
        "sched/mod.rs",
        "mod worker;\n#[cfg(test)]\nmod tests { use super::*; fn t() { super::super::debug::x(); } }\n",
    );
    add(
        "stack/mod.rs",
        "fn f() { $crate::sched::x(); crate::lib_item(); }\n",
    );
    add(
        "stack/deep/leaf.rs",
        "use super::super::super::debug::Capture;\nuse super::sibling;\n",
    );
    add("tests/loom_x.rs", "use crate::debug::anything;\n");
    add("observe.rs", "fn f() {}\n");
    let (violations, unlisted) = check(&layers, &sources);
    let found: Vec<(&str, usize, &str)> = violations
        .iter()
        .map(|v| (v.file.as_str(), v.line, v.to.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            ("sched/mod.rs", 3, "debug"),
            ("sched/worker.rs", 1, "debug"),
            ("sched/worker.rs", 2, "debug"),
            ("sched/worker.rs", 3, "debug"),
            ("sched/worker.rs", 6, "debug"),
            ("sched/worker.rs", 6, "debug"),
            ("stack/deep/leaf.rs", 1, "debug"),
            ("stack/mod.rs", 1, "lib (lib_item)"),
            ("stack/mod.rs", 1, "sched"),
        ]
    );
    assert_eq!(unlisted, BTreeSet::from(["observe".to_string()]));
}

/// The list is read top first, and a description after the name does not matter.
#[test]
fn the_layer_list_is_read_from_the_crate_doc() {
    let layers = Layers::from_crate_doc(
        "//! text\n//! # Layers\n//! prose with ```text inside? no\n//! ```text\n\
         //!   top      the top one\n//!                ▲ arrows and blank lines are skipped\n\
         //!\n//!   bottom   the bottom one\n//! ```\n//! ```text\n//!   later   ignored\n//! ```\n",
    );
    assert_eq!(layers.order, ["bottom", "top"]);
}
