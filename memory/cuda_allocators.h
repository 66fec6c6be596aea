// Process-wide allocators beyond the CPU: each CUDA device's caching allocator and pinned host
// memory. They are created on first use and never destroyed (the CUDA runtime may be gone by the
// time static destructors run, and a DataPtr must never outlive its allocator).
//
//   memory::Allocator& gpu = memory::allocator_for(Device::cuda(0));   // creates it lazily
//   memory::DataPtr staging = memory::pinned_host_allocator().allocate(batch_bytes);
#pragma once

#include <memory>

#include "memory/allocator.h"
#include "memory/caching_allocator.h"
#include "memory/device_memory_source.h"

namespace frugal::memory {

// Page-locked host memory (cudaHostAlloc) for fast, asynchronous copies, counted like the CPU
// allocator. Not cached: a buffer must not be released while a copy from it is in flight.
// Without CUDA, or when no CUDA device is visible at run time, this is cpu_allocator().
Allocator& pinned_host_allocator();

// CUDA devices visible to this process; 0 without CUDA, driver or device. Never throws.
int cuda_device_count() noexcept;

// The caching allocator of CUDA device `device`; throws frugal::Error for a bad index or a build
// without CUDA. allocator_for(Device::cuda(n)) calls this and registers the result.
CachingAllocator& cuda_caching_allocator(int device);

// cudaMalloc / cudaFree / cudaMemGetInfo on `device` (CUDA builds only).
std::unique_ptr<DeviceMemorySource> make_cuda_memory_source(int device);

}  // namespace frugal::memory
