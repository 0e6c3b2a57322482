//! `include/cachalot.h` declares exactly the functions `libcachalot_capi.so` exports, and compiles
//! cleanly as C and as C++ (each skipped, with the reason printed, without its tool).

mod common;

use std::collections::BTreeSet;
use std::process::Command;

use common::{crate_dir, library, scratch};

/// Function names declared in the header: identifiers `cachalot_*` directly followed by `(`.
fn declared() -> BTreeSet<String> {
    let header = std::fs::read_to_string(crate_dir().join("include/cachalot.h")).unwrap();
    let mut names = BTreeSet::new();
    for line in header.lines().filter(|l| !l.trim_start().starts_with('*')) {
        let mut rest = line;
        while let Some(i) = rest.find("cachalot_") {
            let tail = &rest[i..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            if tail[end..].starts_with('(') {
                names.insert(tail[..end].to_string());
            }
            rest = &tail[end..];
        }
    }
    names
}

#[test]
fn header_matches_the_exported_symbols() {
    let names = declared();
    assert!(names.contains("cachalot_malloc") && names.contains("cachalot_free"));
    assert_eq!(names.len(), 27, "{names:?}");
    let lib = library();
    let out = match Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
    {
        Ok(o) if o.status.success() => o,
        _ => {
            common::skip("nm (binutils) not found; cannot list the library's symbols");
            return;
        }
    };
    let exported: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|s| s.starts_with("cachalot_"))
        .map(str::to_string)
        .collect();
    assert_eq!(
        names, exported,
        "cachalot.h and libcachalot_capi.so disagree (left: header, right: library)"
    );
}

#[test]
fn header_compiles_as_c_and_cpp() {
    let src = scratch("uses_header.c");
    // Taking each function's address with the declared type checks the prototypes.
    std::fs::write(
        &src,
        r#"#include "cachalot.h"
void *(*m)(size_t, int, cachalot_stream_t) = cachalot_malloc;
void (*f)(void *, size_t, int, cachalot_stream_t) = cachalot_free;
void (*i)(int) = cachalot_init;
void (*r)(void) = cachalot_reset;
void (*mf)(double, int) = cachalot_set_memory_fraction;
void (*rs)(void *, cachalot_stream_t) = cachalot_record_stream;
const char *(*sj)(int) = cachalot_memory_stats_json;
const char *(*su)(int) = cachalot_memory_summary;
int (*rh)(size_t) = cachalot_record_history;
int (*ds)(const char *) = cachalot_dump_snapshot;
void (*rp)(int) = cachalot_reset_peak_stats;
void (*ra)(int) = cachalot_reset_accumulated_stats;
uint64_t (*uf)(void) = cachalot_unknown_frees;
const char *(*le)(void) = cachalot_last_error;
const char *(*be)(void) = cachalot_backend;
int main(void) { return 0; }
"#,
    )
    .unwrap();
    for (compiler, lang) in [("gcc", "c"), ("g++", "c++")] {
        let Some(mut cc) = cachalot_testkit::compiler(compiler) else {
            continue;
        };
        cc.args([
            "-x",
            lang,
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsyntax-only",
            "-I",
        ])
        .arg(crate_dir().join("include"))
        .arg(&src);
        cachalot_testkit::succeed(&mut cc);
    }
}
