//! AMD GPUs through AMD SMI (`libamd_smi.so`) or, as a fallback, ROCm SMI
//! (`librocm_smi64.so`), both loaded at run time with `libloading`: nothing is
//! linked at build time, so the binary builds and runs without ROCm.
//!
//! The FFI surface is kept to calls whose C signatures take scalars, or whose
//! structs begin with the field read here in every ROCm release since 6.0
//! (`amdsmi.h`, `rocm_smi.h`):
//!
//! | reading | AMD SMI | ROCm SMI |
//! |---|---|---|
//! | socket power W | `amdsmi_get_power_info` -> `amdsmi_power_info_t.current_socket_power` (valid on MI300+), else `.average_socket_power` (Navi, MI200 and earlier) | `rsmi_dev_current_socket_power_get`, else `rsmi_dev_power_ave_get` (µW) |
//! | energy J | `amdsmi_get_energy_count`: accumulator x resolution (µJ) | `rsmi_dev_energy_count_get`, same |
//! | temperature °C | `amdsmi_get_temp_metric` (EDGE, HOTSPOT, VRAM; CURRENT) | `rsmi_dev_temp_metric_get` (m°C) |
//! | clocks MHz | `amdsmi_get_clock_info` (GFX, MEM) -> `amdsmi_clk_info_t.clk` | not read (`rsmi_frequencies_t` changed layout) |
//! | GFX activity % | `amdsmi_get_gpu_activity` -> `amdsmi_engine_usage_t.gfx_activity`, `.umc_activity` | `rsmi_dev_busy_percent_get`, `rsmi_dev_memory_busy_percent_get` |
//! | VRAM bytes | `amdsmi_get_gpu_memory_usage` / `_total` (VRAM) | `rsmi_dev_memory_usage_get` / `_total_get` (VRAM) |
//!
//! `amdsmi_power_info_t` changed layout: up to ROCm 6.3 (library 24.x) it is
//! `{u32 current_socket_power; u32 average_socket_power; ...}`; from ROCm 6.4
//! (library 25.x) on it is `{u64 socket_power; u32 current_socket_power; u32
//! average_socket_power; ...}`. The layout is chosen from the first field of
//! `amdsmi_get_lib_version` (the library's major/"year" version); with an
//! unknown version the power is not read from the library (energy, the other
//! readings still are). Structs are passed as oversized zeroed buffers so a
//! newer, longer struct cannot overrun. Unsupported values are `UINT16_MAX` /
//! `UINT32_MAX` and read as N/A.

use std::ffi::c_void;

use libloading::Library;

use super::{GpuInfo, GpuReading, GpuSource, select_gpus};

type Handle = *mut c_void;

/// Library search list: the plain name (LD_LIBRARY_PATH, ld.so.cache), then
/// the ROCm install prefix (`$ROCM_PATH`, default `/opt/rocm`).
fn candidates(name: &str) -> Vec<String> {
    // Distribution packages (Debian's librocm-smi64-1) ship only the
    // versioned name (`librocm_smi64.so.1`) without the -dev symlink.
    let mut v = vec![name.to_owned(), format!("{name}.1")];
    let rocm = std::env::var("ROCM_PATH").unwrap_or_else(|_| "/opt/rocm".into());
    v.push(format!("{rocm}/lib/{name}"));
    if rocm != "/opt/rocm" {
        v.push(format!("/opt/rocm/lib/{name}"));
    }
    v
}

fn open(name: &str) -> Result<(Library, String), String> {
    let mut errs = Vec::new();
    for c in candidates(name) {
        // SAFETY: loading a vendor library runs its initialisers; these are
        // AMD's own SMI libraries, loaded by their documented names.
        match unsafe { Library::new(&c) } {
            Ok(l) => return Ok((l, c)),
            Err(e) => errs.push(e.to_string()),
        }
    }
    Err(format!("library not found: {}", errs.join("; ")))
}

fn sym<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
    // SAFETY: the caller names the symbol with its documented C signature.
    unsafe { lib.get::<T>(name.as_bytes()).map(|s| *s).map_err(|e| format!("symbol {name}: {e}")) }
}

const NA16: u64 = 0xFFFF;
const NA32: u64 = 0xFFFF_FFFF;

fn valid_w(x: u64) -> Option<f64> {
    // Unsupported markers, and anything no accelerator draws.
    if x == 0 || x == NA16 || x == NA32 || x > 5000 { None } else { Some(x as f64) }
}

// ---- AMD SMI --------------------------------------------------------------

type Status = u32;
const AMDSMI_INIT_AMD_GPUS: u64 = 1 << 1;
const TEMP_EDGE: u32 = 0;
const TEMP_HOTSPOT: u32 = 1;
const TEMP_VRAM: u32 = 2;
const TEMP_CURRENT: u32 = 0;
const CLK_GFX: u32 = 0;
const CLK_MEM: u32 = 4;
const MEM_VRAM: u32 = 0;

#[derive(Clone, Copy)]
struct AmdSmiFns {
    power_info: Option<unsafe extern "C" fn(Handle, *mut u8) -> Status>,
    energy: Option<unsafe extern "C" fn(Handle, *mut u64, *mut f32, *mut u64) -> Status>,
    temp: Option<unsafe extern "C" fn(Handle, u32, u32, *mut i64) -> Status>,
    clock: Option<unsafe extern "C" fn(Handle, u32, *mut u8) -> Status>,
    activity: Option<unsafe extern "C" fn(Handle, *mut u8) -> Status>,
    mem_usage: Option<unsafe extern "C" fn(Handle, u32, *mut u64) -> Status>,
    mem_total: Option<unsafe extern "C" fn(Handle, u32, *mut u64) -> Status>,
}

/// Where `current_socket_power` / `average_socket_power` sit in `amdsmi_power_info_t`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum PowerLayout {
    /// ROCm 6.0-6.3 (library 24.x): offsets 0 and 4.
    V24,
    /// ROCm 6.4+ (library 25.x and later): offsets 8 and 12.
    V25,
    /// Unknown library version: power not read.
    Unknown,
}

fn power_layout(version_first_u32: u32) -> PowerLayout {
    match version_first_u32 {
        24 => PowerLayout::V24,
        25..=99 => PowerLayout::V25,
        _ => PowerLayout::Unknown,
    }
}

/// Decode `amdsmi_power_info_t` (buffer) into (current, average) watts.
fn decode_power(buf: &[u8], layout: PowerLayout) -> (Option<f64>, Option<f64>) {
    let u32_at = |o: usize| u32::from_ne_bytes(buf[o..o + 4].try_into().unwrap()) as u64;
    match layout {
        PowerLayout::V24 => (valid_w(u32_at(0)), valid_w(u32_at(4))),
        PowerLayout::V25 => (valid_w(u32_at(8)), valid_w(u32_at(12))),
        PowerLayout::Unknown => (None, None),
    }
}

/// AMD SMI sampler. Handles are only used on the sampler thread.
pub struct AmdSmiSource {
    _lib: Library,
    fns: AmdSmiFns,
    layout: PowerLayout,
    devices: Vec<(u32, Handle)>,
    shut_down: unsafe extern "C" fn() -> Status,
}

// SAFETY: the processor handles are opaque ids owned by the library; the
// source is created and then used by one thread at a time.
unsafe impl Send for AmdSmiSource {}

impl Drop for AmdSmiSource {
    fn drop(&mut self) {
        // SAFETY: amdsmi_init succeeded when this source was built.
        unsafe { (self.shut_down)() };
    }
}

/// Load `libamd_smi.so`, initialise it for GPUs and pick the devices.
pub fn probe_amd_smi(
    visible: Option<&[u32]>,
    hint: Option<u32>,
) -> Result<(AmdSmiSource, Vec<GpuInfo>, String), String> {
    let (lib, path) = open("libamd_smi.so")?;
    let init: unsafe extern "C" fn(u64) -> Status = sym(&lib, "amdsmi_init")?;
    let shut_down: unsafe extern "C" fn() -> Status = sym(&lib, "amdsmi_shut_down")?;
    let sockets_fn: unsafe extern "C" fn(*mut u32, *mut Handle) -> Status = sym(&lib, "amdsmi_get_socket_handles")?;
    let procs_fn: unsafe extern "C" fn(Handle, *mut u32, *mut Handle) -> Status =
        sym(&lib, "amdsmi_get_processor_handles")?;
    // SAFETY (all calls below): documented signatures, valid out-pointers,
    // buffers larger than any version of the structs.
    let (rc, said) = super::capture::stderr_of(|| unsafe { init(AMDSMI_INIT_AMD_GPUS) });
    if rc != 0 {
        return Err(format!("{path}: amdsmi_init failed with status {rc} ({}){}", amdsmi_status(rc), library_said(&said)));
    }
    let mut version = [0u8; 64];
    let layout = match sym::<unsafe extern "C" fn(*mut u8) -> Status>(&lib, "amdsmi_get_lib_version") {
        Ok(f) if unsafe { f(version.as_mut_ptr()) } == 0 => {
            power_layout(u32::from_ne_bytes(version[..4].try_into().unwrap()))
        }
        _ => PowerLayout::Unknown,
    };
    // (handle, socket index, position in the socket): a socket is one
    // physical package, its processors the partitions, processor 0 the
    // primary (AMD SMI docs/conceptual/partition.md).
    let mut handles: Vec<(Handle, u32, u32)> = Vec::new();
    let mut n_sock = 0u32;
    unsafe {
        if sockets_fn(&mut n_sock, std::ptr::null_mut()) == 0 && n_sock > 0 {
            let mut socks = vec![std::ptr::null_mut(); n_sock as usize];
            if sockets_fn(&mut n_sock, socks.as_mut_ptr()) == 0 {
                for (si, s) in socks.into_iter().take(n_sock as usize).enumerate() {
                    let mut n = 0u32;
                    if procs_fn(s, &mut n, std::ptr::null_mut()) == 0 && n > 0 {
                        let mut ps = vec![std::ptr::null_mut(); n as usize];
                        if procs_fn(s, &mut n, ps.as_mut_ptr()) == 0 {
                            handles.extend(ps.into_iter().take(n as usize).enumerate().map(|(pi, h)| (h, si as u32, pi as u32)));
                        }
                    }
                }
            }
        }
    }
    if handles.is_empty() {
        unsafe { shut_down() };
        return Err(format!("{path} loaded, but no AMD GPU (amdgpu driver not loaded, or no device)"));
    }
    let (indices, notes) = select_gpus(handles.len() as u32, visible, hint);
    let fns = AmdSmiFns {
        power_info: sym(&lib, "amdsmi_get_power_info").ok(),
        energy: sym(&lib, "amdsmi_get_energy_count").ok(),
        temp: sym(&lib, "amdsmi_get_temp_metric").ok(),
        clock: sym(&lib, "amdsmi_get_clock_info").ok(),
        activity: sym(&lib, "amdsmi_get_gpu_activity").ok(),
        mem_usage: sym(&lib, "amdsmi_get_gpu_memory_usage").ok(),
        mem_total: sym(&lib, "amdsmi_get_gpu_memory_total").ok(),
    };
    let devices: Vec<_> = indices.iter().map(|&i| (i, handles[i as usize].0)).collect();
    let gpus = indices
        .iter()
        .map(|&i| {
            let (_, socket, partition) = handles[i as usize];
            GpuInfo { socket: Some(socket), partition: Some(partition), ..GpuInfo::new(i, None, "amd_smi") }
        })
        .collect();
    let mut detail = format!(
        "{path} (library version {}), {} GPU(s) on {} socket(s), sampling {:?}",
        u32::from_ne_bytes(version[..4].try_into().unwrap()),
        handles.len(),
        n_sock,
        indices
    );
    if layout == PowerLayout::Unknown {
        detail.push_str("; power N/A: unknown amdsmi_power_info_t layout for this library version");
    }
    if !notes.is_empty() {
        detail.push_str(&format!(" ({})", notes.join("; ")));
    }
    Ok((AmdSmiSource { _lib: lib, fns, layout, devices, shut_down }, gpus, detail))
}

impl GpuSource for AmdSmiSource {
    fn read(&mut self) -> Vec<GpuReading> {
        let f = self.fns;
        self.devices
            .iter()
            .map(|&(gpu, h)| {
                let mut r = GpuReading { gpu, ..Default::default() };
                // SAFETY: documented signatures, valid out-pointers, oversized buffers.
                unsafe {
                    if let Some(p) = f.power_info {
                        let mut buf = [0u8; 512];
                        if p(h, buf.as_mut_ptr()) == 0 {
                            let (cur, avg) = decode_power(&buf, self.layout);
                            r.power_w = cur.or(avg);
                            r.power_avg_w = avg;
                        }
                    }
                    if let Some(e) = f.energy {
                        let (mut acc, mut res, mut ts) = (0u64, 0f32, 0u64);
                        if e(h, &mut acc, &mut res, &mut ts) == 0 && res > 0.0 {
                            r.energy_j = Some(acc as f64 * res as f64 * 1e-6);
                        }
                    }
                    if let Some(t) = f.temp {
                        let read = |kind| {
                            let mut v = 0i64;
                            (t(h, kind, TEMP_CURRENT, &mut v) == 0 && v > 0 && (v as u64) < NA16).then_some(v as f64)
                        };
                        r.temp_c = read(TEMP_EDGE);
                        r.temp_hotspot_c = read(TEMP_HOTSPOT);
                        r.temp_mem_c = read(TEMP_VRAM);
                    }
                    if let Some(c) = f.clock {
                        let read = |kind| {
                            let mut buf = [0u8; 128];
                            (c(h, kind, buf.as_mut_ptr()) == 0)
                                .then(|| u32::from_ne_bytes(buf[..4].try_into().unwrap()) as u64)
                                .filter(|&v| v != NA16 && v != NA32)
                                .map(|v| v as f64)
                        };
                        r.gfx_clock_mhz = read(CLK_GFX);
                        r.mem_clock_mhz = read(CLK_MEM);
                    }
                    if let Some(a) = f.activity {
                        let mut buf = [0u8; 256];
                        if a(h, buf.as_mut_ptr()) == 0 {
                            let at = |o: usize| u32::from_ne_bytes(buf[o..o + 4].try_into().unwrap()) as u64;
                            r.util_pct = Some(at(0)).filter(|&v| v <= 100).map(|v| v as f64);
                            r.mem_util_pct = Some(at(4)).filter(|&v| v <= 100).map(|v| v as f64);
                        }
                    }
                    if let (Some(u), Some(t)) = (f.mem_usage, f.mem_total) {
                        let (mut used, mut total) = (0u64, 0u64);
                        if u(h, MEM_VRAM, &mut used) == 0 {
                            r.mem_used_bytes = Some(used);
                        }
                        if t(h, MEM_VRAM, &mut total) == 0 {
                            r.mem_total_bytes = Some(total);
                        }
                    }
                }
                r
            })
            .collect()
    }
}

/// A few `amdsmi_status_t` values in words.
fn amdsmi_status(rc: u32) -> &'static str {
    match rc {
        2 => "not supported",
        4 => "failed to load a module",
        10 => "permission denied",
        18 => "init error",
        31 => "device not found",
        34 => "driver not loaded",
        _ => "see amdsmi_status_t",
    }
}

// ---- ROCm SMI -------------------------------------------------------------

#[derive(Clone, Copy)]
struct RsmiFns {
    current_power: Option<unsafe extern "C" fn(u32, *mut u64) -> Status>,
    avg_power: Option<unsafe extern "C" fn(u32, u32, *mut u64) -> Status>,
    energy: Option<unsafe extern "C" fn(u32, *mut u64, *mut f32, *mut u64) -> Status>,
    temp: Option<unsafe extern "C" fn(u32, u32, u32, *mut i64) -> Status>,
    busy: Option<unsafe extern "C" fn(u32, *mut u32) -> Status>,
    mem_busy: Option<unsafe extern "C" fn(u32, *mut u32) -> Status>,
    mem_usage: Option<unsafe extern "C" fn(u32, u32, *mut u64) -> Status>,
    mem_total: Option<unsafe extern "C" fn(u32, u32, *mut u64) -> Status>,
}

/// ROCm SMI sampler (device indices are `dv_ind`).
pub struct RocmSmiSource {
    _lib: Library,
    fns: RsmiFns,
    devices: Vec<u32>,
    shut_down: unsafe extern "C" fn() -> Status,
}

impl Drop for RocmSmiSource {
    fn drop(&mut self) {
        // SAFETY: rsmi_init succeeded when this source was built.
        unsafe { (self.shut_down)() };
    }
}

/// Load `librocm_smi64.so`, initialise it and pick the devices.
pub fn probe_rocm_smi(
    visible: Option<&[u32]>,
    hint: Option<u32>,
) -> Result<(RocmSmiSource, Vec<GpuInfo>, String), String> {
    let (lib, path) = open("librocm_smi64.so")?;
    let init: unsafe extern "C" fn(u64) -> Status = sym(&lib, "rsmi_init")?;
    let shut_down: unsafe extern "C" fn() -> Status = sym(&lib, "rsmi_shut_down")?;
    let count_fn: unsafe extern "C" fn(*mut u32) -> Status = sym(&lib, "rsmi_num_monitor_devices")?;
    // SAFETY: documented signatures and valid out-pointers.
    let (rc, said) = super::capture::stderr_of(|| unsafe { init(0) });
    if rc != 0 {
        return Err(format!("{path}: rsmi_init failed with status {rc}{}", library_said(&said)));
    }
    let mut n = 0u32;
    if unsafe { count_fn(&mut n) } != 0 || n == 0 {
        unsafe { shut_down() };
        return Err(format!("{path} loaded, but no AMD GPU"));
    }
    let (devices, notes) = select_gpus(n, visible, hint);
    let pci_id: Option<unsafe extern "C" fn(u32, *mut u64) -> Status> = sym(&lib, "rsmi_dev_pci_id_get").ok();
    let bdfids: Vec<Option<u64>> = (0..n)
        .map(|dv| {
            let mut id = 0u64;
            // SAFETY: documented signature, valid out-pointer.
            pci_id.filter(|f| unsafe { f(dv, &mut id) } == 0).map(|_| id)
        })
        .collect();
    let packages = packages_from_bdfids(&bdfids);
    let fns = RsmiFns {
        current_power: sym(&lib, "rsmi_dev_current_socket_power_get").ok(),
        avg_power: sym(&lib, "rsmi_dev_power_ave_get").ok(),
        energy: sym(&lib, "rsmi_dev_energy_count_get").ok(),
        temp: sym(&lib, "rsmi_dev_temp_metric_get").ok(),
        busy: sym(&lib, "rsmi_dev_busy_percent_get").ok(),
        mem_busy: sym(&lib, "rsmi_dev_memory_busy_percent_get").ok(),
        mem_usage: sym(&lib, "rsmi_dev_memory_usage_get").ok(),
        mem_total: sym(&lib, "rsmi_dev_memory_total_get").ok(),
    };
    let gpus = devices
        .iter()
        .map(|&i| {
            let (socket, partition) = packages[i as usize];
            GpuInfo { socket, partition, ..GpuInfo::new(i, None, "rocm_smi") }
        })
        .collect();
    let mut detail = format!("{path}, {n} GPU(s), sampling {devices:?}; clocks not read through ROCm SMI");
    if !notes.is_empty() {
        detail.push_str(&format!(" ({})", notes.join("; ")));
    }
    Ok((RocmSmiSource { _lib: lib, fns, devices, shut_down }, gpus, detail))
}

impl GpuSource for RocmSmiSource {
    fn read(&mut self) -> Vec<GpuReading> {
        let f = self.fns;
        self.devices
            .iter()
            .map(|&dv| {
                let mut r = GpuReading { gpu: dv, ..Default::default() };
                // SAFETY: documented signatures and valid out-pointers.
                unsafe {
                    let uw_to_w = |uw: u64| valid_w((uw as f64 / 1e6).round() as u64).map(|_| uw as f64 / 1e6);
                    if let Some(c) = f.current_power {
                        let mut uw = 0u64;
                        if c(dv, &mut uw) == 0 {
                            r.power_w = uw_to_w(uw);
                        }
                    }
                    if let Some(a) = f.avg_power {
                        let mut uw = 0u64;
                        if a(dv, 0, &mut uw) == 0 {
                            r.power_avg_w = uw_to_w(uw);
                        }
                    }
                    r.power_w = r.power_w.or(r.power_avg_w);
                    if let Some(e) = f.energy {
                        let (mut acc, mut res, mut ts) = (0u64, 0f32, 0u64);
                        if e(dv, &mut acc, &mut res, &mut ts) == 0 && res > 0.0 {
                            r.energy_j = Some(acc as f64 * res as f64 * 1e-6);
                        }
                    }
                    if let Some(t) = f.temp {
                        let read = |kind| {
                            let mut v = 0i64;
                            (t(dv, kind, TEMP_CURRENT, &mut v) == 0 && v > 0).then_some(v as f64 / 1000.0)
                        };
                        r.temp_c = read(TEMP_EDGE);
                        r.temp_hotspot_c = read(TEMP_HOTSPOT);
                        r.temp_mem_c = read(TEMP_VRAM);
                    }
                    let pct = |g: Option<unsafe extern "C" fn(u32, *mut u32) -> Status>| {
                        let mut v = 0u32;
                        g.filter(|g| g(dv, &mut v) == 0 && v <= 100).map(|_| v as f64)
                    };
                    r.util_pct = pct(f.busy);
                    r.mem_util_pct = pct(f.mem_busy);
                    let mem = |g: Option<unsafe extern "C" fn(u32, u32, *mut u64) -> Status>| {
                        let mut v = 0u64;
                        g.filter(|g| g(dv, MEM_VRAM, &mut v) == 0).map(|_| v)
                    };
                    r.mem_used_bytes = mem(f.mem_usage);
                    r.mem_total_bytes = mem(f.mem_total);
                }
                r
            })
            .collect()
    }
}

/// (package, partition) of each device from its `rsmi_dev_pci_id_get` id
/// (`None`: unknown). ROCm SMI's id is `domain << 32 | partition << 28 |
/// bus << 8 | device << 3 | function`, with the partition in bits 31:28, or
/// in the function bits 2:0 on older drivers (rocm_smi.cc and rocm_smi.py
/// `getBus` in ROCm/rocm_smi_lib): devices that differ only in those bits
/// are partitions of one package. Packages are numbered in order of first
/// appearance.
fn packages_from_bdfids(ids: &[Option<u64>]) -> Vec<(Option<u32>, Option<u32>)> {
    const PARTITION_BITS: u64 = 0xF << 28;
    const FUNCTION_BITS: u64 = 0x7;
    let mut keys: Vec<u64> = Vec::new();
    ids.iter()
        .map(|id| {
            let Some(id) = *id else { return (None, None) };
            let key = id & !(PARTITION_BITS | FUNCTION_BITS);
            let high = ((id & PARTITION_BITS) >> 28) as u32;
            let partition = if high != 0 { high } else { (id & FUNCTION_BITS) as u32 };
            let socket = keys.iter().position(|&k| k == key).unwrap_or_else(|| {
                keys.push(key);
                keys.len() - 1
            });
            (Some(socket as u32), Some(partition))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_share_a_package_by_pci_id() {
        // Two MI300X: one in CPX (8 partitions, 0000:0c:00.0-7 as the
        // function), one in SPX (0000:22:00.0); and a device whose id is unknown.
        let cpx = |p: u64| Some((0x0c << 8) | p);
        let mut ids: Vec<Option<u64>> = (0..8).map(cpx).collect();
        ids.push(Some(0x22 << 8));
        ids.push(None);
        let p = packages_from_bdfids(&ids);
        assert_eq!(p[0], (Some(0), Some(0)));
        assert_eq!(p[7], (Some(0), Some(7)));
        assert_eq!(p[8], (Some(1), Some(0)));
        assert_eq!(p[9], (None, None));
        // The partition in bits 31:28 (newer drivers).
        let p = packages_from_bdfids(&[Some(0x0c << 8), Some((3 << 28) | (0x0c << 8))]);
        assert_eq!(p, vec![(Some(0), Some(0)), (Some(0), Some(3))]);
    }

    #[test]
    fn power_info_layouts() {
        let mut old = [0u8; 64];
        old[0..4].copy_from_slice(&750u32.to_ne_bytes());
        old[4..8].copy_from_slice(&0xFFFFu32.to_ne_bytes());
        assert_eq!(decode_power(&old, PowerLayout::V24), (Some(750.0), None));
        let mut new = [0u8; 64];
        new[0..8].copy_from_slice(&750u64.to_ne_bytes());
        new[8..12].copy_from_slice(&750u32.to_ne_bytes());
        new[12..16].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(decode_power(&new, PowerLayout::V25), (Some(750.0), None));
        assert_eq!(decode_power(&new, PowerLayout::Unknown), (None, None));
        assert_eq!(power_layout(24), PowerLayout::V24);
        assert_eq!(power_layout(26), PowerLayout::V25);
        assert_eq!(power_layout(6), PowerLayout::Unknown);
    }

    #[test]
    fn missing_libraries_are_clean_reasons() {
        if std::path::Path::new("/dev/kfd").exists() {
            eprintln!("AMD device present; skipping the missing-library check");
            return;
        }
        let e = probe_amd_smi(None, None).err().expect("no libamd_smi here");
        assert!(e.starts_with("library not found") || e.contains("no AMD GPU"), "{e}");
        // Debian's librocm-smi64-1 (installed by ci/test.sh) loads but finds no GPU.
        let e = probe_rocm_smi(None, None).err().expect("no AMD GPU here");
        assert!(e.starts_with("library not found") || e.contains("no AMD GPU") || e.contains("rsmi_init failed"), "{e}");
    }
}

/// "; the library said: ..." with what it printed during init, if anything.
fn library_said(text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if lines.is_empty() { String::new() } else { format!("; the library said: {}", lines.join(" | ")) }
}
