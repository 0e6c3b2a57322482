// Raising torch's exceptions from cachalot_malloc.
//
// torch's CUDAPluggableAllocator calls the allocation function and never checks what it
// returns, so the only way to give PyTorch an out-of-memory it understands is to throw the
// C++ exception torch's own allocator throws: c10::OutOfMemoryError, which torch's Python
// bindings turn into torch.OutOfMemoryError. We are not linked against torch: the exception's
// constructor and type information are looked up at run time in the libc10.so that the
// process has loaded, and the exception is thrown through the Itanium C++ ABI.
//
// Nothing is thrown unless libc10.so is loaded and the code that called into this library is
// torch's own (cachalot_host_can_throw): a C program, or Python's ctypes in a process that has
// imported torch, gets NULL and cachalot_last_error(), as the header promises. An exception
// thrown at a caller without a C++ handler (ctypes, a C frame) would end in std::terminate.

#include <cxxabi.h>
#include <dlfcn.h>
#include <unwind.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <typeinfo>

// throw_old_abi.cpp (compiled with the old C++ string ABI).
extern "C" void cachalot_construct_old_abi(void* ctor, void* self, const char* function,
                                           const char* file, uint32_t line, const char* msg);

namespace {

// c10::SourceLocation: { const char* function; const char* file; uint32_t line; }.
struct SourceLocation {
  const char* function;
  const char* file;
  uint32_t line;
};

// c10::Error(SourceLocation, std::string) and c10::OutOfMemoryError(SourceLocation,
// std::string): constructors called as functions whose first argument is `this`.
using Constructor = void (*)(void* self, SourceLocation where, std::string msg);

// Room for the exception object. c10::Error is about 150 bytes in torch 2.x and
// OutOfMemoryError adds no members; torch catches by reference, so a larger allocation is only
// unused space, while a smaller one would be memory corruption.
constexpr std::size_t kExceptionRoom = 1024;

constexpr const char* kErrorType = "_ZTIN3c105ErrorE";
constexpr const char* kErrorCtor =
    "_ZN3c105ErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE";
constexpr const char* kOomType = "_ZTIN3c1016OutOfMemoryErrorE";
// torch <= 2.9: OutOfMemoryError inherits Error's constructors inline (no constructor of its
// own is exported); its type information and vtable are weak symbols of libc10_cuda.so.
constexpr const char* kOomVtable = "_ZTVN3c1016OutOfMemoryErrorE";
// torch built with the old C++ string ABI (before 2.7): the constructors take that std::string
// ("Ss"), built by throw_old_abi.cpp.
constexpr const char* kErrorCtorOldAbi = "_ZN3c105ErrorC1ENS_14SourceLocationESs";
constexpr const char* kOomCtorOldAbi = "_ZN3c1016OutOfMemoryErrorC1ENS_14SourceLocationESs";
constexpr const char* kOomCtor =
    "_ZN3c1016OutOfMemoryErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_"
    "traitsIcESaIcEEE";

// A symbol of the loaded libc10: first in the global scope, then in libc10.so itself (Python
// loads torch's libraries with RTLD_LOCAL, so they are usually not global). RTLD_NOLOAD: never
// load torch, only find it.
void* c10_symbol(const char* name) {
  if (void* s = dlsym(RTLD_DEFAULT, name)) return s;
  for (const char* so : {"libc10.so", "libc10_cuda.so"}) {
    void* lib = dlopen(so, RTLD_LAZY | RTLD_NOLOAD);
    if (lib == nullptr) continue;
    void* s = dlsym(lib, name);
    dlclose(lib);  // NOLOAD took a reference to a library that stays loaded
    if (s != nullptr) return s;
  }
  return nullptr;
}

// Whether `path` names one of torch's libraries (libtorch*.so*, libc10*.so*), whose frames
// catch c10::Error and turn it into a Python exception.
bool is_torch_library(const char* path) {
  if (path == nullptr) return false;
  const char* slash = std::strrchr(path, '/');
  const char* name = slash != nullptr ? slash + 1 : path;
  return std::strncmp(name, "libtorch", 8) == 0 || std::strncmp(name, "libc10", 6) == 0;
}

// The walk up the stack: frames inside this library are skipped; the first one outside it
// is the caller, and the verdict is whether it is torch's.
struct CallerWalk {
  const void* self_base;  // where this library is loaded
  int frames_left;        // a bound, in case the unwinder loops
  bool torch_called;
};

_Unwind_Reason_Code visit_frame(struct _Unwind_Context* context, void* arg) {
  auto* walk = static_cast<CallerWalk*>(arg);
  if (--walk->frames_left < 0) return _URC_END_OF_STACK;
  uintptr_t ip = _Unwind_GetIP(context);
  if (ip == 0) return _URC_NO_REASON;
  Dl_info info{};
  // ip - 1: the return address may be the first byte of the next function.
  if (dladdr(reinterpret_cast<void*>(ip - 1), &info) == 0) return _URC_END_OF_STACK;
  if (info.dli_fbase == walk->self_base) return _URC_NO_REASON;
  walk->torch_called = is_torch_library(info.dli_fname);
  return _URC_END_OF_STACK;
}

// Whether the nearest frame outside this library belongs to torch (CUDAPluggableAllocator
// calling cachalot_malloc), rather than a C program or ctypes.
bool called_by_torch() {
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&called_by_torch), &self) == 0) return false;
  CallerWalk walk{self.dli_fbase, 256, false};
  _Unwind_Backtrace(visit_frame, &walk);
  return walk.torch_called;
}

void destroy(void* object) {
  // c10::Error derives from std::exception alone, so the object starts with its vtable
  // pointer and the virtual destructor runs the most-derived destructor.
  static_cast<std::exception*>(object)->~exception();
}

// `vtable` (or null): the vtable symbol of a class derived from c10::Error that adds no
// members, whose object is made by Error's constructor `ctor` and then given that class's
// virtual table (its address point is two pointers in: offset-to-top, type information).
// `old_abi`: `ctor` takes the old C++ string ABI's std::string (throw_old_abi.cpp calls it).
[[noreturn]] void throw_c10(void* type, void* ctor, const char* msg, void* vtable = nullptr,
                            bool old_abi = false) {
  void* object = abi::__cxa_allocate_exception(kExceptionRoom);
  try {
    if (old_abi) {
      cachalot_construct_old_abi(ctor, object, "cachalot_malloc", __FILE__, __LINE__, msg);
    } else {
      reinterpret_cast<Constructor>(ctor)(object, {"cachalot_malloc", __FILE__, __LINE__},
                                          std::string(msg));
    }
  } catch (...) {
    abi::__cxa_free_exception(object);
    throw;
  }
  if (vtable != nullptr) *static_cast<void**>(object) = static_cast<void**>(vtable) + 2;
  abi::__cxa_throw(object, static_cast<std::type_info*>(type), destroy);
}

}  // namespace

extern "C" {

// Whether a failure may be thrown as torch's exception: the process has torch's libc10
// loaded, and torch's code called into this library (so a handler waits for c10::Error).
// Never throws itself.
bool cachalot_host_can_throw() noexcept {
  try {
    return c10_symbol(kErrorType) != nullptr && called_by_torch();
  } catch (...) {
    return false;
  }
}

// Throws torch's exception for `msg`: c10::OutOfMemoryError when `out_of_memory` (so torch
// raises torch.OutOfMemoryError), else c10::Error (RuntimeError). Where torch's symbols
// cannot be found, a std::runtime_error with the same text, which torch also converts.
[[noreturn]] void cachalot_host_throw(bool out_of_memory, const char* msg) {
  void* type = c10_symbol(out_of_memory ? kOomType : kErrorType);
  void* ctor = c10_symbol(out_of_memory ? kOomCtor : kErrorCtor);
  if (type != nullptr && ctor != nullptr) throw_c10(type, ctor, msg);
  void* old = c10_symbol(out_of_memory ? kOomCtorOldAbi : kErrorCtorOldAbi);
  if (type != nullptr && old != nullptr) throw_c10(type, old, msg, nullptr, true);
  if (out_of_memory && type != nullptr) {  // torch <= 2.9 (kOomVtable)
    void* vtable = c10_symbol(kOomVtable);
    void* base = c10_symbol(kErrorCtor);
    bool old_abi = base == nullptr;
    if (old_abi) base = c10_symbol(kErrorCtorOldAbi);
    if (vtable != nullptr && base != nullptr) throw_c10(type, base, msg, vtable, old_abi);
  }
  throw std::runtime_error(msg);
}

}  // extern "C"
