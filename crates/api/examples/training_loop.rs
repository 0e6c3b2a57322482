//! A training loop's memory pattern through cachalot: parameters that live for the whole run,
//! activations that grow and shrink every step, a side stream for data loading.
//!
//! Runs on GPU 0 when the CUDA driver is there (and checks that the memory really holds
//! data), else on a simulated 16 GiB GPU. The allocator is configured like PyTorch's:
//!
//! ```text
//! cargo run -p cachalot --example training_loop
//! PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True cargo run -p cachalot --example training_loop
//! PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync cargo run -p cachalot --example training_loop
//! ```

use std::error::Error;

use cachalot::{Allocator, Device, DeviceBuffer, Settings, SimConfig, SimDevice, StreamId};

const MIB: usize = 1 << 20;

/// Ten steps of a small model; returns the buffers still alive (the parameters).
fn train<D: Device>(alloc: &Allocator<D>) -> Result<Vec<DeviceBuffer<D>>, Box<dyn Error>> {
    let compute = StreamId::DEFAULT;
    // On a GPU a side stream must be a real CUDA stream; on the simulator any number will do.
    let loader = compute;
    let params: Vec<_> = (0..8)
        .map(|i| alloc.alloc((4 + i) * MIB, compute))
        .collect::<Result<_, _>>()?;
    for step in 0..10usize {
        // The batch arrives on the loader stream and is used by the compute stream.
        let batch = alloc.alloc(6 * MIB + step * 4096, loader)?;
        batch.record_stream(compute)?;
        // Forward: activations of varying size, kept for backward.
        let acts: Vec<_> = (0..12)
            .map(|layer| alloc.alloc((1 + (layer + step) % 5) * 3 * MIB + 1000, compute))
            .collect::<Result<_, _>>()?;
        // Backward: gradients, freed as soon as they are applied.
        for p in &params {
            let grad = alloc.alloc(p.len(), compute)?;
            drop(grad);
        }
        drop(acts);
        drop(batch);
        let s = alloc.stats()?;
        println!(
            "step {step}: allocated {:>9}  reserved {:>9}  device allocations {}",
            cachalot::format_size(s.allocated_bytes.all().current as u64),
            cachalot::format_size(s.reserved_bytes.all().current as u64),
            s.num_device_alloc,
        );
    }
    Ok(params)
}

fn report<D: Device>(alloc: &Allocator<D>) -> Result<(), Box<dyn Error>> {
    let s = alloc.stats()?;
    println!(
        "backend {:?}: peak allocated {}, peak reserved {}, {} device allocations, {} retries",
        alloc.backend(),
        cachalot::format_size(s.allocated_bytes.all().peak as u64),
        cachalot::format_size(s.reserved_bytes.all().peak as u64),
        s.num_device_alloc,
        s.num_alloc_retries,
    );
    alloc.empty_cache()?;
    let s = alloc.stats()?;
    println!(
        "after empty_cache: reserved {}",
        cachalot::format_size(s.reserved_bytes.all().current as u64)
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let settings = Settings::from_env()?;
    println!("configuration: {}", settings.source);
    for w in &settings.warnings {
        println!("warning: {w}");
    }
    #[cfg(feature = "cuda")]
    match cachalot::CudaDevice::new(0) {
        Ok(gpu) => {
            println!("running on GPU 0: {}", gpu.name());
            let alloc = Allocator::new(&settings, gpu)?;
            let params = train(&alloc)?;
            // The memory is real: write a pattern into a parameter and read it back.
            let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 31 % 251) as u8).collect();
            let mut back = vec![0u8; pattern.len()];
            let p = params[3].device_ptr();
            alloc.with_device(|d| d.copy_to_device(p, &pattern))?;
            alloc.with_device(|d| d.copy_from_device(p, &mut back))?;
            assert_eq!(back, pattern, "device memory round trip");
            println!("wrote and read back {} bytes at {p:#x}", pattern.len());
            drop(params);
            return report(&alloc);
        }
        Err(e) => println!("{e}; running on a simulated 16 GiB GPU instead"),
    }
    let alloc = Allocator::new(
        &settings,
        SimDevice::new(SimConfig::with_capacity(16 << 30)),
    )?;
    let params = train(&alloc)?;
    drop(params);
    report(&alloc)
}
