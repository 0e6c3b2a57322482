// Constructing torch's exceptions in torch builds with the old C++ string ABI.
//
// torch wheels before 2.7 (e.g. 2.4.1+cu121) are built with _GLIBCXX_USE_CXX11_ABI=0: their
// c10::Error constructors take the old (copy-on-write) std::string, mangled "Ss"
// (_ZN3c105ErrorC1ENS_14SourceLocationESs). This file is compiled with that ABI (build.rs), so
// its std::string is the one those constructors expect; throw.cpp, compiled with the current
// ABI, calls it when only the old-ABI constructors are in the loaded libc10.
#include <cstdint>
#include <string>

static_assert(!_GLIBCXX_USE_CXX11_ABI, "build.rs compiles this file with the old string ABI");

namespace {
// c10::SourceLocation, as in throw.cpp.
struct SourceLocation {
  const char* function;
  const char* file;
  uint32_t line;
};
using OldAbiConstructor = void (*)(void* self, SourceLocation where, std::string msg);
}  // namespace

extern "C" void cachalot_construct_old_abi(void* ctor, void* self, const char* function,
                                           const char* file, uint32_t line, const char* msg) {
  reinterpret_cast<OldAbiConstructor>(ctor)(self, {function, file, line}, std::string(msg));
}
