//! Builds the C++ shim that throws torch's exceptions (see `cpp/throw.cpp`).

fn main() {
    println!("cargo:rerun-if-changed=cpp/throw.cpp");
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file("cpp/throw.cpp")
        .warnings(true)
        .compile("cachalot_throw");
    // The shim itself needs libdl for dlsym (part of libc on current glibc, a no-op there).
    println!("cargo:rustc-link-lib=dl");
}
