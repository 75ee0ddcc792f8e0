//! Shared by the providers' integration tests: splitting bytes the way a
//! network might (the stream parsers' fuzzing), and an adapter built, as
//! the engine builds it, for a simulator.

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

/// The adapter for provider `p` pointed at `sim`, built from settings as
/// the engine builds it.
pub async fn adapter_for(
    sim: &understudy_testkit::SimProvider,
) -> std::sync::Arc<dyn understudy_core::Adapter> {
    use understudy_core::AdapterFactory as _;
    let settings = understudy_testkit::TestGateway::builder()
        .provider("p", sim)
        .settings()
        .expect("the simulator's settings");
    understudy_providers::Providers
        .build(&settings.providers["p"])
        .expect("an adapter for the simulator")
}
