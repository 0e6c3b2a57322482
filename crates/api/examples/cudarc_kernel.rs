//! A real cudarc kernel on memory from cachalot's allocator: `scale` multiplies every element
//! of a `CudaBuffer<f32>` in place, and the result is copied back and checked.
//!
//! ```text
//! cargo run -p cachalot --example cudarc_kernel
//! ```
//!
//! Without a usable GPU it says why it skipped and exits successfully.

// Launching a kernel is `unsafe` in cudarc (it cannot check the kernel's signature).
#![allow(unsafe_code)]

use std::error::Error;

use cachalot::cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
use cachalot::cudarc::nvrtc::Ptx;
use cachalot::{Allocator, CudaDevice, Settings};

/// `out[i] *= factor` for `i < n`, in PTX (JIT-compiled by the driver, so neither NVRTC nor a
/// CUDA toolkit is needed).
const SCALE_PTX: &str = r#"
.version 7.0
.target sm_52
.address_size 64

.visible .entry scale(
    .param .u64 out,
    .param .f32 factor,
    .param .u32 n
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<3>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [out];
    ld.param.f32 %f1, [factor];
    ld.param.u32 %r2, [n];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r1, %r3, %r4, %r5;
    setp.ge.u32 %p1, %r1, %r2;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f2, [%rd4];
    mul.f32 %f2, %f2, %f1;
    st.global.f32 [%rd4], %f2;
DONE:
    ret;
}
"#;

fn main() -> Result<(), Box<dyn Error>> {
    let gpu = match CudaDevice::new(0) {
        Ok(gpu) => gpu,
        Err(e) => {
            println!("skipped: no usable GPU ({e})");
            return Ok(());
        }
    };
    let settings = Settings::from_env()?;
    println!("configuration: {}", settings.source);
    let alloc = Allocator::new(&settings, gpu)?;
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let scale = ctx
        .load_module(Ptx::from_src(SCALE_PTX))?
        .load_function("scale")?;

    let n: u32 = 1 << 20;
    let host: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut buf = alloc.alloc_on::<f32>(&stream, n as usize)?;
    stream.memcpy_htod(&host, &mut buf)?;
    let factor = 3.0f32;
    let mut launch = stream.launch_builder(&scale);
    launch.arg(&mut buf).arg(&factor).arg(&n);
    // SAFETY: `scale` takes (float*, float, unsigned) and writes only out[0..n], which `buf`
    // holds (n f32 elements).
    unsafe { launch.launch(LaunchConfig::for_num_elems(n))? };
    let back = stream.clone_dtoh(&buf)?;
    let wrong = back
        .iter()
        .zip(&host)
        .filter(|(got, x)| **got != **x * factor)
        .count();
    let stats = alloc.stats()?;
    println!(
        "kernel on a cachalot buffer at {:#x}: {} of {n} elements wrong; allocated {}, \
         reserved {}, {} device allocations",
        buf.cu_device_ptr(),
        wrong,
        cachalot::format_size(stats.allocated_bytes.all().current as u64),
        cachalot::format_size(stats.reserved_bytes.all().current as u64),
        stats.num_device_alloc,
    );
    drop(buf);
    stream.synchronize()?;
    if wrong != 0 {
        return Err(format!("{wrong} elements differ from x * {factor}").into());
    }
    Ok(())
}
