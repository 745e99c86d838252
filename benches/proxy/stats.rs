//! Percentiles of exact samples, and the same quantiles estimated from a Prometheus histogram the way
//! `histogram_quantile` does (linear interpolation inside the bucket).

/// Nearest-rank percentile of unsorted samples; `q` in [0, 1]. `None` when empty.
pub fn percentile(samples: &mut [u64], q: f64) -> Option<u64> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
    Some(samples[rank - 1])
}

/// Cumulative bucket counts (`le` in seconds, count) of one histogram, summed over its label sets.
pub fn buckets(exposition: &str, name: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{");
    let mut out: Vec<(f64, f64)> = Vec::new();
    for line in exposition.lines().filter(|l| l.starts_with(&prefix)) {
        let Some(le_at) = line.find("le=\"") else {
            continue;
        };
        let rest = &line[le_at + 4..];
        let Some(le_end) = rest.find('"') else {
            continue;
        };
        let le = match &rest[..le_end] {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or(f64::NAN),
        };
        let Some(count) = line
            .rsplit_once(' ')
            .and_then(|(_, c)| c.trim().parse::<f64>().ok())
        else {
            continue;
        };
        match out.iter_mut().find(|(l, _)| *l == le) {
            Some((_, c)) => *c += count,
            None => out.push((le, count)),
        }
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// `after − before`, bucket by bucket (the observations made between two scrapes).
pub fn delta(after: &[(f64, f64)], before: &[(f64, f64)]) -> Vec<(f64, f64)> {
    after
        .iter()
        .map(|&(le, c)| {
            let b = before
                .iter()
                .find(|(l, _)| *l == le)
                .map_or(0.0, |(_, c)| *c);
            (le, c - b)
        })
        .collect()
}

/// `histogram_quantile(q, ...)` on cumulative buckets, in seconds.
pub fn histogram_quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = 0.0;
    let mut below = 0.0;
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(lower);
            }
            let inside = count - below;
            let frac = if inside > 0.0 {
                (rank - below) / inside
            } else {
                1.0
            };
            return Some(lower + (le - lower) * frac);
        }
        lower = le;
        below = count;
    }
    None
}
