//! The README is a front door that stays true: its server example is
//! `weft/examples/graceful_echo.rs` (which `cargo test` compiles and `tests/graceful_sigterm.rs`
//! runs), its other snippets are doc tests (`ReadmeDoctests` in lib.rs), it stays short, and
//! its tour names the APIs people look for first at its top.

const README: &str = include_str!("../../README.md");

#[test]
fn the_readme_shows_the_graceful_echo_example_as_it_compiles() {
    let example = include_str!("../examples/graceful_echo.rs");
    assert!(
        README.contains(example),
        "README.md's copy of weft/examples/graceful_echo.rs is stale"
    );
    assert!(
        example.lines().count() < 40,
        "the example grew past 40 lines"
    );
    // rustfmt aligns a comment line under the trailing comment of the line above it.
    let misplaced = example.lines().find(|line| {
        let code = line.trim_start();
        code.starts_with("//") && line.len() - code.len() > 16
    });
    assert_eq!(misplaced, None, "a comment line indented past its code");
}

#[test]
fn the_readme_is_short_and_every_snippet_runs() {
    let lines = README.lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines; the rest belongs in docs/"
    );
    // Doc tests run ```rust blocks; one marked ignore (or compile_fail) would not run.
    for fence in README.lines().filter(|l| l.starts_with("```rust")) {
        assert!(
            fence == "```rust" || fence == "```rust,no_run",
            "a README snippet that the doc tests would not compile: {fence}"
        );
    }
    // The one no_run snippet is the example above, which tests/graceful_sigterm.rs runs.
    assert_eq!(README.matches("```rust,no_run").count(), 1);
}

#[test]
fn the_tour_names_the_first_apis_in_its_first_screenful() {
    let tour = &README[README.find("## A tour").expect("no tour")..];
    let screen: String = tour.lines().take(10).collect::<Vec<_>>().join("\n");
    for topic in [
        "Spawn and join",
        "select!",
        "TCP server and client",
        "deadline",
        "Graceful shutdown",
        "Blocking crates",
        "Metrics and task dumps",
    ] {
        assert!(
            screen.contains(topic),
            "the tour's top does not name {topic:?}"
        );
    }
}

#[test]
fn every_docs_page_the_readme_links_exists() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    for link in README.split("](").skip(1) {
        let target = link.split(')').next().unwrap();
        let path = target.split('#').next().unwrap();
        if path.is_empty() || path.starts_with("http") {
            continue;
        }
        assert!(
            std::path::Path::new(root).join(path).exists(),
            "README links to {target}, which does not exist"
        );
    }
}
