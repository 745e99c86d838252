//! The harness's command line (see `main.rs` for what each argument does).

use std::path::PathBuf;

use crate::target::{Kind, Setup};

#[derive(Debug, Clone)]
pub struct Args {
    pub setup: Setup,
    pub reps: usize,
    pub quick: bool,
    pub out: Option<PathBuf>,
    /// Only these phases (latency, sweep, requests, memory); all when empty.
    pub only: Vec<String>,
    /// Streams held open at each step of the memory phase, instead of the default steps.
    pub memory_steps: Vec<usize>,
    /// Fixed work for a profiler around this proxy instead of the timed phases.
    pub profile: Option<Kind>,
    pub profile_secs: f64,
    /// Rounds of the field's lanes (`lanes.rs`).
    pub lane_rounds: usize,
}

impl Args {
    pub fn runs(&self, phase: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|p| p == phase)
    }
}

pub fn parse_args() -> Result<Args, String> {
    let mut tokentap = None;
    let mut nginx = None;
    let mut haproxy = None;
    let mut hyper = None;
    let mut baseline = None;
    let mut proxy_cpu = None;
    let mut reps = 3;
    let mut quick = false;
    let mut out = None;
    let mut only = Vec::new();
    let mut memory_steps = Vec::new();
    let mut profile = None;
    let mut profile_secs = 10.0;
    let mut lane_rounds = 7;
    let mut logs = true;
    let mut baseline_records = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--tokentap" => tokentap = Some(PathBuf::from(value("--tokentap")?)),
            "--nginx" => nginx = Some(PathBuf::from(value("--nginx")?)),
            "--haproxy" => haproxy = Some(PathBuf::from(value("--haproxy")?)),
            "--hyper" => hyper = Some(PathBuf::from(value("--hyper")?)),
            "--baseline" => baseline = Some(PathBuf::from(value("--baseline")?)),
            "--proxy-cpu" => {
                proxy_cpu = Some(value("--proxy-cpu")?.parse().map_err(|e| format!("{e}"))?)
            }
            "--reps" => reps = value("--reps")?.parse().map_err(|e| format!("{e}"))?,
            "--out" => out = Some(PathBuf::from(value("--out")?)),
            "--quick" => quick = true,
            "--only" => only = value("--only")?.split(',').map(str::to_owned).collect(),
            "--memory-steps" => {
                memory_steps = value("--memory-steps")?
                    .split(',')
                    .map(|n| {
                        n.parse::<usize>()
                            .map_err(|e| format!("--memory-steps: {e}"))
                    })
                    .collect::<Result<_, _>>()?
            }
            "--profile" => {
                profile = Some(match value("--profile")?.as_str() {
                    "tokentap" => Kind::Tokentap,
                    "nginx" => Kind::Nginx,
                    "haproxy" => Kind::Haproxy,
                    "hyper" => Kind::Hyper,
                    other => {
                        return Err(format!(
                            "--profile {other}: tokentap, nginx, haproxy or hyper"
                        ))
                    }
                })
            }
            "--profile-secs" => {
                profile_secs = value("--profile-secs")?
                    .parse()
                    .map_err(|e| format!("--profile-secs: {e}"))?
            }
            "--lane-rounds" => {
                lane_rounds = value("--lane-rounds")?
                    .parse()
                    .map_err(|e| format!("--lane-rounds: {e}"))?
            }
            "--logs" => {
                logs = match value("--logs")?.as_str() {
                    "on" => true,
                    "off" => false,
                    other => return Err(format!("--logs {other}: on or off")),
                }
            }
            "--baseline-records" => {
                baseline_records = match value("--baseline-records")?.as_str() {
                    "stalled" => true,
                    "off" => false,
                    other => return Err(format!("--baseline-records {other}: stalled or off")),
                }
            }
            "--bench" => {} // added by `cargo bench`
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let tokentap = tokentap.ok_or("--tokentap PATH is required")?;
    let dir = std::env::temp_dir().join(format!("tokentap-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(Args {
        setup: Setup {
            tokentap,
            baseline,
            nginx,
            haproxy,
            hyper,
            proxy_cpu,
            dir,
            nginx_single: profile == Some(Kind::Nginx),
            logs,
            baseline_records,
        },
        reps: reps.max(1),
        quick,
        out,
        only,
        memory_steps,
        profile,
        profile_secs,
        lane_rounds: lane_rounds.max(1),
    })
}
