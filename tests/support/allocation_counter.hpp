// tests/support/allocation_counter.hpp — counts the allocations a stretch of a test makes:
//
//   alloc_counter::reset(); alloc_counter::counting = true;  ...  alloc_counter::counting = false;
//   CHECK(alloc_counter::operator_news == 0);  CHECK(alloc_counter::mallocs == 0);
//
// It replaces the global operator new and operator delete (every replaceable form; not under ThreadSanitizer, whose
// runtime defines them and is linked whole: ATTEND_TEST_COUNTS_NEW is then left undefined), and, with glibc outside
// a sanitizer build, interposes malloc, calloc, realloc, aligned_alloc, posix_memalign and memalign as well,
// forwarding them to glibc's own __libc_* functions (ATTEND_TEST_COUNTS_MALLOC): Eigen allocates its matrices and
// tensors with malloc, not operator new, so the operators alone would miss them. Both count only while
// alloc_counter::counting is set (by any thread: OpenMP's workers too); free() is glibc's own, untouched.
// It defines functions: include it in one file of a test program only.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <new>

namespace alloc_counter {
const void* volatile escape = nullptr;  // where the counter's own check stores its pointers, so none is optimised away
std::atomic<bool> counting{false};
std::atomic<long> operator_news{0};  // operator new calls, every form
std::atomic<long> mallocs{0};        // malloc family calls (glibc without sanitizers only)
inline void reset() {
  operator_news = 0;
  mallocs = 0;
}
}  // namespace alloc_counter

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define ATTEND_TEST_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ATTEND_TEST_SANITIZED 1
#endif
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ATTEND_TEST_THREAD_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define ATTEND_TEST_THREAD_SANITIZED 1
#endif
#ifndef ATTEND_TEST_THREAD_SANITIZED
#define ATTEND_TEST_COUNTS_NEW 1
#endif
#if defined(__GLIBC__) && !defined(ATTEND_TEST_SANITIZED)
#define ATTEND_TEST_COUNTS_MALLOC 1
#endif

#ifdef ATTEND_TEST_COUNTS_MALLOC
// glibc's own allocator, under the names it exports besides malloc & co.
extern "C" void* __libc_malloc(std::size_t size);
extern "C" void* __libc_calloc(std::size_t count, std::size_t size);
extern "C" void* __libc_realloc(void* p, std::size_t size);
extern "C" void* __libc_memalign(std::size_t alignment, std::size_t size);

namespace alloc_counter {
inline void count_malloc() {
  if (counting.load(std::memory_order_relaxed)) mallocs.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace alloc_counter

extern "C" void* malloc(std::size_t size) noexcept {
  alloc_counter::count_malloc();
  return __libc_malloc(size);
}
extern "C" void* calloc(std::size_t count, std::size_t size) noexcept {
  alloc_counter::count_malloc();
  return __libc_calloc(count, size);
}
extern "C" void* realloc(void* p, std::size_t size) noexcept {
  alloc_counter::count_malloc();
  return __libc_realloc(p, size);
}
extern "C" void* memalign(std::size_t alignment, std::size_t size) noexcept {
  alloc_counter::count_malloc();
  return __libc_memalign(alignment, size);
}
extern "C" void* aligned_alloc(std::size_t alignment, std::size_t size) noexcept {
  alloc_counter::count_malloc();
  return __libc_memalign(alignment, size);
}
extern "C" int posix_memalign(void** out, std::size_t alignment, std::size_t size) noexcept {
  alloc_counter::count_malloc();
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) return EINVAL;
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr && size != 0) return ENOMEM;
  *out = p;
  return 0;
}
#endif

#ifdef ATTEND_TEST_COUNTS_NEW
namespace alloc_counter {
inline void count_new() {
  if (counting.load(std::memory_order_relaxed)) operator_news.fetch_add(1, std::memory_order_relaxed);
}
inline void* allocate(std::size_t size) {
  count_new();
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
inline void* allocate(std::size_t size, std::align_val_t alignment) {
  count_new();
  const auto a = static_cast<std::size_t>(alignment);
  void* p = nullptr;
  if (posix_memalign(&p, a < sizeof(void*) ? sizeof(void*) : a, size == 0 ? 1 : size) != 0) throw std::bad_alloc();
  return p;
}
}  // namespace alloc_counter

void* operator new(std::size_t size) { return alloc_counter::allocate(size); }
void* operator new[](std::size_t size) { return alloc_counter::allocate(size); }
void* operator new(std::size_t size, std::align_val_t a) { return alloc_counter::allocate(size, a); }
void* operator new[](std::size_t size, std::align_val_t a) { return alloc_counter::allocate(size, a); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return alloc_counter::allocate(size);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return alloc_counter::allocate(size);
  } catch (...) {
    return nullptr;
  }
}
void* operator new(std::size_t size, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return alloc_counter::allocate(size, a);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return alloc_counter::allocate(size, a);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
#endif

// The opening of a test that counts: it ends the test, saying why, where nothing can be counted, and warns where
// malloc goes unseen (then only operator new is counted).
#if !defined(ATTEND_TEST_COUNTS_NEW)
#define ATTEND_TEST_START_COUNTING()                                                          \
  do {                                                                                        \
    WARN("operator new is not replaced under ThreadSanitizer: nothing here is counted");     \
    return;                                                                                   \
  } while (false)
#elif !defined(ATTEND_TEST_COUNTS_MALLOC)
#define ATTEND_TEST_START_COUNTING() \
  WARN("malloc is not counted here (not glibc, or a sanitizer build): Eigen's allocations go unseen")
#else
#define ATTEND_TEST_START_COUNTING() static_cast<void>(0)
#endif
