//! The README's server example is `weft/examples/graceful_echo.rs`, which `cargo test`
//! compiles: this keeps the README's copy the same as the compiled one.

#[test]
fn the_readme_shows_the_graceful_echo_example_as_it_compiles() {
    let readme = include_str!("../../README.md");
    let example = include_str!("../examples/graceful_echo.rs");
    assert!(
        readme.contains(example),
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
