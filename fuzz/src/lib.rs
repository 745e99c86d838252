//! What the fuzz targets share: how an input is cut into the frames the network might deliver.

/// Cuts `data` into frames whose lengths follow `seed` (1 to 17 bytes each, a different sequence for
/// each seed), so one input byte picks how the same bytes arrive.
pub fn frames(data: &[u8], seed: u8) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let (mut rest, mut n) = (data, usize::from(seed));
    while !rest.is_empty() {
        n = n.wrapping_mul(31).wrapping_add(7);
        let (head, tail) = rest.split_at((n % 17 + 1).min(rest.len()));
        out.push(head);
        rest = tail;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::frames;

    #[test]
    fn the_frames_put_back_together_are_the_input_whatever_the_seed() {
        let data: Vec<u8> = (0..=255).collect();
        for seed in 0..=u8::MAX {
            let cut = frames(&data, seed);
            assert!(cut.iter().all(|f| (1..=17).contains(&f.len())));
            assert_eq!(cut.concat(), data);
        }
        assert!(frames(&[], 3).is_empty());
    }
}
