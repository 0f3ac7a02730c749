//! TESTING.md's hardware recipe skips the tests of a device that is not mlx5 by name
//! (`--skip device_that_is_not_mlx5`): every test that needs such a device (it calls
//! `require_not_mellanox…`, directly or through a helper of its file) must carry that in its
//! name, or the recipe fails on a ConnectX. Host-only: reads the test sources.
use std::collections::BTreeSet;
use std::path::Path;

/// What TESTING.md's hardware recipe passes to `--skip`.
const RECIPE_SKIP: &str = "device_that_is_not_mlx5";

/// The functions of `source` (`fn name(` at the start of a line after its indentation, or after
/// `pub `, so also those of nested modules), with their text up to the next one, and whether a
/// `#[test]` attribute precedes them.
fn functions(source: &str) -> Vec<(String, String, bool)> {
    let mut found = Vec::new();
    let mut attributes_test = false;
    let mut current: Option<(String, String, bool)> = None;
    for line in source.lines() {
        let trimmed = line.trim_start();
        let head = trimmed.strip_prefix("pub ").unwrap_or(trimmed);
        if let Some(rest) = head.strip_prefix("fn ") {
            found.extend(current.take());
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            current = Some((name, String::new(), attributes_test));
            attributes_test = false;
            continue;
        }
        if trimmed.starts_with("#[test]") {
            attributes_test = true;
        }
        if let Some((_, body, _)) = current.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    found.extend(current);
    found
}

/// The tests of `source` that need a device that is not mlx5.
fn tests_needing_a_device_that_is_not_mlx5(source: &str) -> Vec<String> {
    let functions = functions(source);
    let mut needing: BTreeSet<String> = BTreeSet::new();
    // Callers of require_not_mellanox…, then callers of those, within the file.
    let mut callees = vec!["require_not_mellanox".to_string()];
    while let Some(callee) = callees.pop() {
        for (name, body, _) in &functions {
            if !needing.contains(name) && body.contains(callee.as_str()) && name != &callee {
                needing.insert(name.clone());
                callees.push(name.clone());
            }
        }
    }
    functions
        .into_iter()
        .filter(|(name, _, test)| *test && needing.contains(name))
        .map(|(name, _, _)| name)
        .collect()
}

#[test]
fn every_test_of_a_device_that_is_not_mlx5_is_skipped_by_the_hardware_recipe() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Both crates' tests: sideway-ext's and sideway-ext-dc-pool's (dc-pool/).
    let dirs = [root.join("tests"), root.join("dc-pool").join("tests")];
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("TESTING.md")).expect("TESTING.md");
    assert!(
        readme.contains(&format!("--skip {RECIPE_SKIP}")),
        "TESTING.md's hardware recipe no longer skips {RECIPE_SKIP}: update this test"
    );
    let mut checked = 0;
    let mut misnamed = Vec::new();
    for entry in dirs.iter().flat_map(|dir| std::fs::read_dir(dir).expect("tests/")) {
        let path = entry.expect("entry").path();
        // This file's own example of a scan is no test of a device.
        if path.extension().is_none_or(|e| e != "rs") || path.ends_with("test_suite_names.rs") {
            continue;
        }
        let source = std::fs::read_to_string(&path).expect("read a test file");
        for test in tests_needing_a_device_that_is_not_mlx5(&source) {
            checked += 1;
            if !test.contains(RECIPE_SKIP) {
                misnamed.push(format!("{}: {test}", path.file_name().unwrap().to_string_lossy()));
            }
        }
    }
    // test_dc, test_mlx5_device, and dc-pool's test_dc_pool and test_dc_pingpong have such tests.
    assert!(
        checked >= 6,
        "only {checked} tests found that need a device that is not mlx5"
    );
    assert!(
        misnamed.is_empty(),
        "these tests fail on a ConnectX but TESTING.md's recipe (--skip {RECIPE_SKIP}) runs them: {misnamed:?}"
    );
}

#[test]
fn the_scan_follows_helpers() {
    let source = "fn helper() {\n    common::require_not_mellanox(&ctx);\n}\n\n#[test]\nfn a_test() {\n    helper();\n}\n\n#[test]\nfn other() {\n    nothing();\n}\n";
    assert_eq!(tests_needing_a_device_that_is_not_mlx5(source), ["a_test"]);
    // A test before a nested module does not take in the module's functions.
    let nested = "#[test]\nfn host_only() {\n    read();\n}\n\nmod device {\n    #[test]\n    fn on_rxe() {\n        common::require_not_mellanox(&ctx);\n    }\n}\n";
    assert_eq!(tests_needing_a_device_that_is_not_mlx5(nested), ["on_rxe"]);
}
