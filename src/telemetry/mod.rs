//! Telemetry sampled beside the engine (in progress): the monotonic clock
//! shared with the worker, energy math, and the amd-smi / rocm-smi JSON parsers.

#![allow(dead_code, unused_imports)]

pub mod amd_json;
mod clock;
pub mod energy;

use serde::{Deserialize, Serialize};

pub use clock::{mono_now_s, thread_cpu_s};

/// One GPU's readings at one time. Absent fields were not available (N/A).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuReading {
    /// GPU index (physical, as the source numbers them).
    pub gpu: u32,
    /// When the reading was taken, mono s, if not the sample's `t` (CLI tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t: Option<f64>,
    /// Power, W (NVML power usage; AMD current socket power, else average).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_w: Option<f64>,
    /// AMD average socket power, W, where the device reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_avg_w: Option<f64>,
    /// Cumulative energy counter, J (origin arbitrary: use differences).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_j: Option<f64>,
    /// Edge temperature (NVIDIA: the GPU die), °C.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temp_c: Option<f64>,
    /// Hotspot / junction temperature, °C.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temp_hotspot_c: Option<f64>,
    /// Memory temperature, °C.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temp_mem_c: Option<f64>,
    /// SM (NVIDIA) / GFX (AMD) clock, MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gfx_clock_mhz: Option<f64>,
    /// Memory clock, MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_clock_mhz: Option<f64>,
    /// Utilisation, % (NVIDIA: time a kernel ran; AMD: GFX activity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub util_pct: Option<f64>,
    /// Memory-controller utilisation, %.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_util_pct: Option<f64>,
    /// Device memory used, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_used_bytes: Option<u64>,
    /// Device memory installed, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_total_bytes: Option<u64>,
    /// Enforced power limit, W (NVIDIA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_w: Option<f64>,
    /// NVML clocks-throttle-reason bit mask (see `nvml::THROTTLE_REASONS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle_reasons: Option<u64>,
}

