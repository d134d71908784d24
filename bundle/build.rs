//! The built-in profiles as JSON, made from their TOML (the source, in `profiles/`) at build
//! time: a start parses the default profile with serde_json in a few microseconds instead of
//! with the TOML parser (60-100 µs; issue 18). `profiles::tests` checks that every one reads
//! the same both ways.

use std::path::{Path, PathBuf};

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let mut files: Vec<PathBuf> = vec![];
    for dir in ["profiles", "profiles/agents"] {
        println!("cargo:rerun-if-changed={dir}");
        let rd = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
        for e in rd {
            let p = e.unwrap_or_else(|e| panic!("{dir}: {e}")).path();
            if p.extension().is_some_and(|x| x == "toml") {
                files.push(p);
            }
        }
    }
    for p in files {
        println!("cargo:rerun-if-changed={}", p.display());
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let v: toml::Value =
            toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let json = serde_json::to_string(&v).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        std::fs::write(out.join(json_name(&p)), json)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    }
}

/// `profiles/agents/claude.toml` -> `agents-claude.json`, `profiles/ci.toml` -> `ci.json`.
fn json_name(p: &Path) -> String {
    let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    match p
        .parent()
        .and_then(|d| d.file_name())
        .and_then(|d| d.to_str())
    {
        Some("agents") => format!("agents-{stem}.json"),
        _ => format!("{stem}.json"),
    }
}
