//! Shared by the providers' integration tests: splitting bytes the way a
//! network might, for the stream parsers' fuzzing.

/// Splits `data` at the given cut points (each taken modulo its length).
pub fn split(data: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
    points.sort_unstable();
    let mut out = Vec::new();
    let mut last = 0;
    for p in points {
        out.push(data[last..p].to_vec());
        last = p;
    }
    out.push(data[last..].to_vec());
    out
}
