//! Debug helper: replay a trace with a capacity and write the segments log to stdout.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let trace = cachalot_replay::load_rmm(std::path::Path::new(&args[1])).unwrap();
    let conf = cachalot_core::config::parse_pytorch(args.get(3).map(|s| s.as_str()).unwrap_or(""))
        .unwrap()
        .0;
    let opts = cachalot_replay::ReplayOptions {
        conf,
        sim: cachalot_sim::SimConfig::with_capacity(args[2].parse().unwrap()),
        log_segments: true,
        ..Default::default()
    };
    let r = cachalot_replay::replay(&trace, &opts).unwrap();
    cachalot_replay::report::write_segments(std::io::stdout(), &r.segments).unwrap();
}
