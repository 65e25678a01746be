//! GODEBUG values: merging the settings a sized binary needs into the ones a service has.
//!
//! Owns the text of a `GODEBUG` value: comma-separated `key=value` fields that the runtime
//! reads left to right at startup, a later field overriding an earlier one of the same key,
//! empty and `=`-less fields skipped (`parsegodebug` in `runtime/runtime1.go`). The runtime
//! reads its linked-in default (`runtime.godebugDefault`, which `go build` sets to the
//! module's `DefaultGODEBUG` with `-X`) first, then the `GODEBUG` environment variable.
//!
//! Invariants:
//! 1. A merge keeps every field of the existing value whose key it does not set, in order,
//!    and appends its own fields last: nothing of the service's own settings is lost, and
//!    ours win.
//!
//! May call: nothing. Called by: `report` (the run line), `main` (the build-flag route).
//!
//! Why merge rather than set: a service that already runs with, say, `GODEBUG=http2client=0`
//! would lose it if told to run with `GODEBUG=adaptivestackstart=0`; and `-X
//! runtime.godebugDefault=` replaces the module's defaults (`panicnil=1`, `x509sha1=1`, …
//! for an old `go` line in go.mod) rather than adding to them.

/// The settings a binary whose starting stack was applied runs with: no recomputation of
/// the starting size at each GC, and no shrinking of stacks by the GC.
pub const RUN_SETTINGS: [(&str, &str); 2] =
    [("adaptivestackstart", "0"), ("gcshrinkstackoff", "1")];

/// `existing` with `add` merged in (invariant 1).
pub fn merge(existing: &str, add: &[(&str, &str)]) -> String {
    let mut fields: Vec<String> = existing
        .split(',')
        .filter(|f| {
            let key = f.split_once('=').map(|(k, _)| k.trim());
            key.is_some_and(|k| !k.is_empty() && !add.iter().any(|(a, _)| *a == k))
        })
        .map(str::to_string)
        .collect();
    fields.extend(add.iter().map(|(k, v)| format!("{k}={v}")));
    fields.join(",")
}

/// `s` quoted for a POSIX shell when it holds anything beyond the plain characters of a
/// GODEBUG value or a path.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "=,._-/+:@%".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_keeps_other_keys_and_overrides_ours() {
        assert_eq!(
            merge("", &RUN_SETTINGS),
            "adaptivestackstart=0,gcshrinkstackoff=1"
        );
        assert_eq!(
            merge("http2client=0,adaptivestackstart=1,,junk", &RUN_SETTINGS),
            "http2client=0,adaptivestackstart=0,gcshrinkstackoff=1"
        );
        assert_eq!(
            merge("panicnil=1,x509sha1=1", &RUN_SETTINGS[1..]),
            "panicnil=1,x509sha1=1,gcshrinkstackoff=1"
        );
    }

    #[test]
    fn quotes_only_when_needed() {
        assert_eq!(shell_quote("a=1,b=2"), "a=1,b=2");
        assert_eq!(shell_quote("./my app"), "'./my app'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
