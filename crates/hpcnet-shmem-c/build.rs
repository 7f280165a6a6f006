//! Builds the PE-side runtime (`runtime/shmem_rt.c`) into a static library with the system C
//! compiler (`$CC`, else `cc`). Without a C compiler the crate still builds: the archive is
//! empty and `hpcnet shmem-cc` says why it cannot link.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let src = PathBuf::from("runtime/shmem_rt.c");
    println!("cargo:rerun-if-changed=runtime/shmem_rt.c");
    println!("cargo:rerun-if-changed=include/shmem.h");
    println!("cargo:rerun-if-env-changed=CC");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let obj = out.join("shmem_rt.o");
    let lib = out.join("libhpcnet_shmem.a");
    let _ = std::fs::remove_file(&lib);
    let built = Command::new(&cc)
        .args(["-std=gnu11", "-O2", "-fPIC", "-Wall", "-Iinclude", "-c"])
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
        && Command::new(std::env::var("AR").unwrap_or_else(|_| "ar".into()))
            .arg("rcs")
            .arg(&lib)
            .arg(&obj)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
    if !built {
        println!(
            "cargo:warning=no C compiler ('{cc}') or archiver: the OpenSHMEM C runtime was not built; install gcc to use `hpcnet shmem-cc`"
        );
        std::fs::write(&lib, b"").expect("write the empty archive");
    }
}
