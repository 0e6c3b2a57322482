//! Builds the C++ shim that throws torch's exceptions (see `cpp/throw.cpp`, and
//! `cpp/throw_old_abi.cpp` for torch builds with the old C++ string ABI).

fn main() {
    println!("cargo:rerun-if-changed=cpp/throw.cpp");
    println!("cargo:rerun-if-changed=cpp/throw_old_abi.cpp");
    // torch builds with the old C++ string ABI (before 2.7) construct their exceptions from
    // that ABI's std::string: one file compiled with it.
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .define("_GLIBCXX_USE_CXX11_ABI", "0")
        .file("cpp/throw_old_abi.cpp")
        .warnings(true)
        .compile("cachalot_throw_old_abi");
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file("cpp/throw.cpp")
        .warnings(true)
        .compile("cachalot_throw");
    // The shim itself needs libdl for dlsym (part of libc on current glibc, a no-op there).
    println!("cargo:rustc-link-lib=dl");
}
