//! NVIDIA GPUs through NVML (`nvml-wrapper`, which opens `libnvidia-ml.so.1`
//! at run time: the binary builds and runs on machines without the driver).
//!
//! Units as NVML gives them, converted: power mW -> W, from the field
//! `NVML_FI_DEV_POWER_INSTANT` (`nvmlDeviceGetFieldValues`) where the driver
//! has it, else `nvmlDeviceGetPowerUsage`, which on Ampere (except GA100) and
//! newer returns power averaged over 1 s (NVML API reference,
//! `nvmlDeviceGetPowerUsage`: "See NVML_FI_DEV_POWER_AVERAGE and
//! NVML_FI_DEV_POWER_INSTANT to query specific power values"); which one is
//! used is `GpuInfo::power_field`, chosen once per device at probe time.
//! Energy stays `nvmlDeviceGetTotalEnergyConsumption` mJ since the driver
//! loaded (Volta and newer) -> J; temperature °C; clocks MHz; utilisation %; memory
//! bytes; power limit `nvmlDeviceGetEnforcedPowerLimit` mW -> W; throttle
//! reasons `nvmlDeviceGetCurrentClocksThrottleReasons` bit mask.

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::FieldValueSample;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::NVML_FI_DEV_POWER_INSTANT;

use super::{GpuInfo, GpuReading, GpuSource, select_gpus};

/// NVML sampler over the selected device indices.
pub struct NvmlSource {
    nvml: Nvml,
    /// (device index, whether its power comes from the instantaneous field).
    indices: Vec<(u32, bool)>,
}

/// `GpuInfo::power_field` of a device read through the instantaneous field.
pub const POWER_INSTANT: &str = "NVML_FI_DEV_POWER_INSTANT (instantaneous)";
/// `GpuInfo::power_field` of a device read through `nvmlDeviceGetPowerUsage`.
pub const POWER_USAGE: &str = "nvmlDeviceGetPowerUsage (a 1 s average on Ampere, except GA100, and newer)";

/// Watts from one `NVML_FI_DEV_POWER_INSTANT` field value (mW, of whichever
/// integer or float type the driver tags it with); `None` when the driver
/// could not read it.
pub fn instant_power_w(sample: &Result<FieldValueSample, NvmlError>) -> Option<f64> {
    let mw = match sample.as_ref().ok()?.value.as_ref().ok()? {
        SampleValue::F64(v) => *v,
        SampleValue::U32(v) => f64::from(*v),
        SampleValue::U64(v) => *v as f64,
        SampleValue::I64(v) => *v as f64,
    };
    (mw.is_finite() && mw >= 0.0).then_some(mw / 1000.0)
}

/// The instantaneous power of device `d`, W, if its driver has the field.
fn read_instant(d: &nvml_wrapper::Device) -> Option<f64> {
    let values = d.field_values_for(&[FieldId(NVML_FI_DEV_POWER_INSTANT)]).ok()?;
    values.first().and_then(instant_power_w)
}

/// Why NVML could not be used, in words.
fn reason(e: &NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(l) => format!("library not found: {l}"),
        NvmlError::FailedToLoadSymbol(s) => format!("libnvidia-ml lacks a symbol: {s}"),
        NvmlError::DriverNotLoaded => "NVIDIA driver not loaded".into(),
        NvmlError::NoPermission => "permission denied".into(),
        NvmlError::LibraryNotFound => "library not found".into(),
        other => format!("NVML error: {other}"),
    }
}

/// Open NVML and pick the devices. `Err` carries the reason NVML is not used.
pub fn probe(visible: Option<&[u32]>, hint: Option<u32>) -> Result<(NvmlSource, Vec<GpuInfo>, String), String> {
    let nvml = Nvml::init().map_err(|e| reason(&e))?;
    let count = nvml.device_count().map_err(|e| reason(&e))?;
    if count == 0 {
        return Err("NVML loaded, but no device".into());
    }
    let (indices, mut notes) = select_gpus(count, visible, hint);
    if indices.is_empty() {
        return Err(format!("{count} device(s), none of them selected: {}", notes.join("; ")));
    }
    let mut gpus = Vec::new();
    let mut na = Vec::new();
    let mut sampled = Vec::new();
    for &i in &indices {
        let d = nvml.device_by_index(i).map_err(|e| format!("device {i}: {}", reason(&e)))?;
        let instant = read_instant(&d).is_some();
        sampled.push((i, instant));
        let field = if instant { POWER_INSTANT } else { POWER_USAGE };
        gpus.push(GpuInfo { power_field: Some(field.to_owned()), ..GpuInfo::new(i, d.name().ok(), "nvml") });
        if i == indices[0] {
            // Which readings this device does not give (reported once, not per sample).
            let checks: [(&str, Option<NvmlError>); 4] = [
                ("power", d.power_usage().err()),
                ("total energy counter (Volta+)", d.total_energy_consumption().err()),
                ("utilisation", d.utilization_rates().err()),
                ("throttle reasons", d.current_throttle_reasons().err()),
            ];
            na.extend(checks.into_iter().filter_map(|(what, e)| e.map(|e| format!("{what}: {}", reason(&e)))));
        }
    }
    let driver = nvml.sys_driver_version().unwrap_or_default();
    let fields: Vec<&str> = gpus.iter().filter_map(|g| g.power_field.as_deref()).collect();
    let field = if fields.iter().all(|f| *f == POWER_INSTANT) { POWER_INSTANT } else if fields.iter().all(|f| *f == POWER_USAGE) { POWER_USAGE } else { "per device (see gpus)" };
    let mut detail = format!("driver {driver}, {count} device(s), sampling {:?}; power: {field}", indices);
    if !na.is_empty() {
        notes.push(format!("N/A on device {}: {}", indices[0], na.join("; ")));
    }
    if !notes.is_empty() {
        detail.push_str(&format!(" ({})", notes.join("; ")));
    }
    Ok((NvmlSource { nvml, indices: sampled }, gpus, detail))
}

impl GpuSource for NvmlSource {
    fn read(&mut self) -> Vec<GpuReading> {
        let mut out = Vec::with_capacity(self.indices.len());
        for &(i, instant) in &self.indices {
            let Ok(d) = self.nvml.device_by_index(i) else {
                out.push(GpuReading { gpu: i, ..Default::default() });
                continue;
            };
            let util = d.utilization_rates().ok();
            let mem = d.memory_info().ok();
            out.push(GpuReading {
                gpu: i,
                power_w: if instant { read_instant(&d) } else { d.power_usage().ok().map(|mw| mw as f64 / 1000.0) },
                energy_j: d.total_energy_consumption().ok().map(|mj| mj as f64 / 1000.0),
                temp_c: d.temperature(TemperatureSensor::Gpu).ok().map(f64::from),
                gfx_clock_mhz: d.clock_info(Clock::SM).ok().map(f64::from),
                mem_clock_mhz: d.clock_info(Clock::Memory).ok().map(f64::from),
                util_pct: util.as_ref().map(|u| u.gpu as f64),
                mem_util_pct: util.as_ref().map(|u| u.memory as f64),
                mem_used_bytes: mem.as_ref().map(|m| m.used),
                mem_total_bytes: mem.as_ref().map(|m| m.total),
                power_limit_w: d.enforced_power_limit().ok().map(|mw| mw as f64 / 1000.0),
                throttle_reasons: d.current_throttle_reasons().ok().map(|r| r.bits()),
                ..Default::default()
            });
        }
        out
    }
}

/// Names of NVML's documented `nvmlClocksThrottleReason*` bits.
pub const THROTTLE_REASONS: [(u64, &str); 9] = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// The names of the bits set in an NVML throttle-reason mask.
pub fn throttle_names(mask: u64) -> Vec<String> {
    let mut v: Vec<String> =
        THROTTLE_REASONS.iter().filter(|(b, _)| mask & b != 0).map(|(_, n)| (*n).to_owned()).collect();
    let known: u64 = THROTTLE_REASONS.iter().map(|(b, _)| b).sum();
    if mask & !known != 0 {
        v.push(format!("other(0x{:x})", mask & !known));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_is_a_clean_reason() {
        // No NVIDIA driver on the build machine: a reason, never a panic.
        if std::path::Path::new("/dev/nvidiactl").exists() {
            eprintln!("NVIDIA device present; skipping the missing-library check");
            return;
        }
        let e = probe(None, None).err().expect("NVML must not load here");
        assert!(e.contains("library not found") || e.contains("driver"), "{e}");
    }

    #[test]
    fn instantaneous_power_field_in_watts() {
        let sample = |value: Result<SampleValue, NvmlError>| -> Result<FieldValueSample, NvmlError> {
            Ok(FieldValueSample { field: FieldId(NVML_FI_DEV_POWER_INSTANT), timestamp: 0, latency: 0, value })
        };
        assert_eq!(instant_power_w(&sample(Ok(SampleValue::U32(412_500)))), Some(412.5));
        assert_eq!(instant_power_w(&sample(Ok(SampleValue::U64(700_000)))), Some(700.0));
        assert_eq!(instant_power_w(&sample(Ok(SampleValue::F64(1500.0)))), Some(1.5));
        // A driver without the field: no reading, so the probe keeps the 1 s average.
        assert_eq!(instant_power_w(&sample(Err(NvmlError::NotSupported))), None);
        assert_eq!(instant_power_w(&Err(NvmlError::NotSupported)), None);
        assert_eq!(NVML_FI_DEV_POWER_INSTANT, 186, "nvml.h's field id");
    }

    #[test]
    fn throttle_bits() {
        assert_eq!(throttle_names(0x4 | 0x40), vec!["sw_power_cap", "hw_thermal_slowdown"]);
        assert_eq!(throttle_names(0x1000), vec!["other(0x1000)"]);
    }
}
