//! A gzip bomb under an address-space limit (issue #28 item 8): a small gzip file of many
//! trace rows, loaded by a child process whose `RLIMIT_AS` (`ulimit -v`) is far below what
//! holding the rows takes, gets an error that says so and exits normally, never dies of
//! `memory allocation of N bytes failed` (SIGABRT).

use std::io::Write;
use std::path::Path;
use std::process::Command;

use cachalot_replay::{LoadOptions, load_input, load_path};
use flate2::Compression;
use flate2::write::GzEncoder;

/// The child's address-space limit.
const LIMIT_KIB: u64 = 512 << 10;
/// Rows the bomb holds: enough operations (32 bytes each, and the table doubles) that
/// holding them needs well past [`LIMIT_KIB`].
const ROWS: u64 = 40 << 20;
/// The variable that tells the child test where the bomb is.
const CHILD_VAR: &str = "CACHALOT_TEST_MEMORY_LIMIT_BOMB";
/// The child's exit status when loading failed with an error.
const REFUSED: i32 = 3;

/// Writes the bomb: one gzip member of a block of allocate/free rows, repeated (gzip
/// members concatenate), so that `ROWS` rows take a few hundred KiB on disk.
fn write_bomb(path: &Path) -> u64 {
    let mut block = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
    let header = block.len();
    let pairs = 1 << 16;
    for _ in 0..pairs {
        block.push_str("1,0,allocate,0x1,512,0\n1,0,free,0x1,512,0\n");
    }
    let rows_per_block = 2 * pairs;
    let mut f = std::fs::File::create(path).unwrap();
    let member = |text: &[u8]| {
        let mut e = GzEncoder::new(Vec::new(), Compression::best());
        e.write_all(text).unwrap();
        e.finish().unwrap()
    };
    f.write_all(&member(block.as_bytes())).unwrap();
    let rest = member(&block.as_bytes()[header..]);
    let mut rows = rows_per_block;
    while rows < ROWS {
        f.write_all(&rest).unwrap();
        rows += rows_per_block;
    }
    rows
}

#[test]
fn a_gzip_bomb_under_a_memory_limit_is_an_error_not_an_abort() {
    let dir = cachalot_testkit::scratch();
    let bomb = dir.path().join("bomb.csv.gz");
    let rows = write_bomb(&bomb);
    let on_disk = std::fs::metadata(&bomb).unwrap().len();
    assert!(on_disk < 4 << 20, "the bomb takes {on_disk} bytes");
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {LIMIT_KIB} && exec \"$0\" \"$@\""))
        .arg(&exe)
        .args([
            "--exact",
            "load_the_bomb_in_this_process",
            "--ignored",
            "--nocapture",
        ])
        .arg("--test-threads=1")
        .env(CHILD_VAR, &bomb)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(REFUSED),
        "{rows} rows under {LIMIT_KIB} KiB: {:?}\n{stderr}",
        out.status
    );
    assert!(
        stderr.contains("not enough memory to hold the trace"),
        "{stderr}"
    );
    assert!(stderr.contains("operations read"), "{stderr}");
}

/// Run by the test above in a child process under the limit.
#[test]
#[ignore = "a child of a_gzip_bomb_under_a_memory_limit_is_an_error_not_an_abort"]
fn load_the_bomb_in_this_process() {
    let path = std::env::var_os(CHILD_VAR).expect("run by the memory-limit test");
    let path = Path::new(&path);
    let e = load_input(path, &LoadOptions::default()).expect_err("loaded under the limit");
    eprintln!("load_input: {e}");
    let e = load_path(path).expect_err("loaded under the limit");
    eprintln!("load_path: {e}");
    std::process::exit(REFUSED);
}
