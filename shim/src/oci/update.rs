//! `update` (Docker's `docker update`, containerd's `UpdateTask`, which runs
//! `update --resources -` with the resources as JSON on stdin) and `events` (`--stats` once,
//! or a stats event every `--interval` seconds), in runc's formats.

use std::io::Read;
use std::path::Path;

use oci_spec::runtime::{
    LinuxBlockIoBuilder, LinuxCpuBuilder, LinuxMemoryBuilder, LinuxPidsBuilder, LinuxResources,
};
use serde_json::{json, Value};

use super::{load, OciError};

/// The most a resources document may hold.
const MAX_RESOURCES: u64 = 1 << 20;

/// The fields `update` applies; anything else is refused by name (never dropped): in
/// particular `devices`, which would widen what the container may open.
const UPDATABLE: [&str; 4] = ["memory", "cpu", "pids", "blockIO"];

/// Reads the resources of `update -r FILE` (`-` is stdin).
fn read_resources(path: &Path) -> Result<LinuxResources, OciError> {
    let mut raw = Vec::new();
    let io = |source| OciError::Io {
        what: "reading the resources",
        path: path.to_path_buf(),
        source,
    };
    if path == Path::new("-") {
        std::io::stdin()
            .take(MAX_RESOURCES)
            .read_to_end(&mut raw)
            .map_err(io)?;
    } else {
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_RESOURCES).read_to_end(&mut raw))
            .map_err(io)?;
    }
    let v: Value = serde_json::from_slice(&raw)
        .map_err(|e| OciError::Config(format!("update: the resources are not JSON: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| OciError::Config("update: the resources must be a JSON object".into()))?;
    for (k, val) in obj {
        let empty = val.is_null()
            || val.as_array().is_some_and(Vec::is_empty)
            || val.as_object().is_some_and(serde_json::Map::is_empty);
        if !UPDATABLE.contains(&k.as_str()) && !empty {
            return Err(OciError::Config(format!(
                "update: {k:?} cannot be changed on a running container by vetto-shim (it updates {})",
                UPDATABLE.join(", ")
            )));
        }
    }
    let mut only = serde_json::Map::new();
    for k in UPDATABLE {
        if let Some(Value::Object(fields)) = obj.get(k) {
            // As runc: a zero (or empty) value is "not set". Docker and containerd send every
            // field of a section, zeros included, and a zero reservation or cpu share is
            // otherwise refused, or worse, applied.
            let set: serde_json::Map<String, Value> = fields
                .iter()
                .filter(|(_, v)| {
                    !(v.is_null()
                        || v.as_f64() == Some(0.0)
                        || v.as_str() == Some("")
                        || v.as_array().is_some_and(Vec::is_empty))
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if !set.is_empty() {
                only.insert(k.to_string(), Value::Object(set));
            }
        } else if let Some(v) = obj.get(k).filter(|v| !v.is_null()) {
            only.insert(k.to_string(), v.clone());
        }
    }
    serde_json::from_value(Value::Object(only))
        .map_err(|e| OciError::Config(format!("update: bad resources: {e}")))
}

/// The resources named by `update`'s flags.
fn from_flags(a: &liboci_cli::Update) -> Result<LinuxResources, OciError> {
    let bad = |e: oci_spec::OciSpecError| OciError::Config(format!("update: {e}"));
    let to_i64 = |what: &str, v: u64| {
        i64::try_from(v).map_err(|_| OciError::Config(format!("update: --{what} {v} is too large")))
    };
    let mut r = LinuxResources::default();
    if a.memory.is_some() || a.memory_reservation.is_some() || a.memory_swap.is_some() {
        let mut m = LinuxMemoryBuilder::default();
        if let Some(v) = a.memory {
            m = m.limit(to_i64("memory", v)?);
        }
        if let Some(v) = a.memory_reservation {
            m = m.reservation(to_i64("memory-reservation", v)?);
        }
        if let Some(v) = a.memory_swap {
            m = m.swap(v);
        }
        r.set_memory(Some(m.build().map_err(bad)?));
    }
    if a.cpu_period.is_some()
        || a.cpu_quota.is_some()
        || a.cpu_share.is_some()
        || a.cpu_rt_period.is_some()
        || a.cpu_rt_runtime.is_some()
        || a.cpuset_cpus.is_some()
        || a.cpuset_mems.is_some()
    {
        let mut c = LinuxCpuBuilder::default();
        if let Some(v) = a.cpu_period {
            c = c.period(v);
        }
        if let Some(v) = a.cpu_quota {
            c = c.quota(to_i64("cpu-quota", v)?);
        }
        if let Some(v) = a.cpu_share {
            c = c.shares(v);
        }
        if let Some(v) = a.cpu_rt_period {
            c = c.realtime_period(v);
        }
        if let Some(v) = a.cpu_rt_runtime {
            c = c.realtime_runtime(to_i64("cpu-rt-runtime", v)?);
        }
        if let Some(v) = &a.cpuset_cpus {
            c = c.cpus(v.clone());
        }
        if let Some(v) = &a.cpuset_mems {
            c = c.mems(v.clone());
        }
        r.set_cpu(Some(c.build().map_err(bad)?));
    }
    if let Some(v) = a.pids_limit {
        r.set_pids(Some(
            LinuxPidsBuilder::default().limit(v).build().map_err(bad)?,
        ));
    }
    if let Some(v) = a.blkio_weight {
        let w = u16::try_from(v)
            .map_err(|_| OciError::Config(format!("update: --blkio-weight {v} is out of range")))?;
        r.set_block_io(Some(
            LinuxBlockIoBuilder::default()
                .weight(w)
                .build()
                .map_err(bad)?,
        ));
    }
    if a.l3_cache_schema.is_some() || a.mem_bw_schema.is_some() {
        return Err(OciError::Unsupported("update of Intel RDT schemas"));
    }
    Ok(r)
}

/// `update`.
pub(super) fn update(root: &Path, a: &liboci_cli::Update) -> Result<(), OciError> {
    let c = load(root, &a.container_id)?;
    let r = match &a.resources {
        Some(p) => read_resources(p)?,
        None => from_flags(a)?,
    };
    c.apply_resources(&r, false)?;
    Ok(())
}

/// One stats event in runc's shape (`runc events --stats`; libcontainer's `types.Stats`).
fn stats_event(id: &str, s: &libcgroups::stats::Stats) -> Value {
    let mem = |d: &libcgroups::stats::MemoryData| json!({"limit": d.limit, "usage": d.usage, "max": d.max_usage, "failcnt": d.fail_count});
    let blk = |v: &[libcgroups::stats::BlkioDeviceStat]| {
        v.iter()
            .map(|e| json!({"major": e.major, "minor": e.minor, "op": e.op_type.clone().unwrap_or_default(), "value": e.value}))
            .collect::<Vec<_>>()
    };
    let hugetlb: serde_json::Map<String, Value> = s
        .hugetlb
        .iter()
        .map(|(k, h)| {
            (
                k.clone(),
                json!({"usage": h.usage, "max": h.max_usage, "failcnt": h.fail_count}),
            )
        })
        .collect();
    json!({
        "type": "stats",
        "id": id,
        "data": {
            "cpu": {
                "usage": {
                    "total": s.cpu.usage.usage_total,
                    "percpu": s.cpu.usage.per_core_usage_total,
                    "kernel": s.cpu.usage.usage_kernel,
                    "user": s.cpu.usage.usage_user,
                },
                "throttling": {
                    "periods": s.cpu.throttling.periods,
                    "throttledPeriods": s.cpu.throttling.throttled_periods,
                    "throttledTime": s.cpu.throttling.throttled_time,
                },
            },
            "memory": {
                "cache": s.memory.cache,
                "usage": mem(&s.memory.memory),
                "swap": mem(&s.memory.memswap),
                "kernel": mem(&s.memory.kernel),
                "kernelTCP": mem(&s.memory.kernel_tcp),
                "raw": s.memory.stats,
            },
            "pids": {"current": s.pids.current, "limit": s.pids.limit},
            "blkio": {
                "ioServiceBytesRecursive": blk(&s.blkio.service_bytes),
                "ioServicedRecursive": blk(&s.blkio.serviced),
                "ioQueueRecursive": blk(&s.blkio.queued),
                "ioServiceTimeRecursive": blk(&s.blkio.service_time),
                "ioWaitTimeRecursive": blk(&s.blkio.wait_time),
                "ioMergedRecursive": blk(&s.blkio.merged),
                "ioTimeRecursive": blk(&s.blkio.time),
                "sectorsRecursive": blk(&s.blkio.sectors),
            },
            "hugetlb": hugetlb,
        }
    })
}

/// `events`: with `--stats` one stats event; else one every `--interval` seconds until the
/// container stops.
pub(super) fn events(root: &Path, a: &liboci_cli::Events) -> Result<(), OciError> {
    let c = load(root, &a.container_id)?;
    loop {
        let s = c.stats()?;
        println!("{}", stats_event(&a.container_id, &s));
        if a.stats {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_secs(u64::from(a.interval.max(1))));
        match load(root, &a.container_id) {
            Ok(c) if c.status() == crate::engine::Status::Running => {}
            _ => return Ok(()),
        }
    }
}
