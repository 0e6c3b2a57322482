//! `app::predict` on synthetic traces: the held-out budgets (a job reserving 79.1 GiB is not
//! "fits" on an H100 while 70 GiB is; 23.5 GiB is not on an RTX 4090 while 20 GiB is), the
//! verdicts and their exit statuses, the advice, several ranks, and the JSON's keys.

use std::path::PathBuf;

use cachalot_app::outside::{Communicator, Outside, RankOutside};
use cachalot_app::predict::{
    Advice, EXIT_DOES_NOT_FIT, EXIT_FITS, EXIT_TIGHT, PredictRequest, Verdict, material, predict_in,
};

const MIB: u64 = 1 << 20;
const GIB: f64 = (1u64 << 30) as f64;

/// A CSV trace of `(allocate?, id, size)` rows.
fn rows(dir: &tempfile::TempDir, name: &str, ops: &[(bool, u64, u64)]) -> PathBuf {
    let mut csv = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
    for (t, (alloc, id, size)) in ops.iter().enumerate() {
        let action = if *alloc { "allocate" } else { "free" };
        csv.push_str(&format!("1,{t},{action},{:#x},{size},0\n", (id + 1) << 40));
    }
    let p = dir.path().join(name);
    std::fs::write(&p, csv).unwrap();
    p
}

/// A CSV trace that allocates `sizes` in order and frees them at the end.
fn trace(dir: &tempfile::TempDir, name: &str, sizes: &[u64]) -> PathBuf {
    let mut csv = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
    let mut t = 0;
    for (i, s) in sizes.iter().enumerate() {
        csv.push_str(&format!("1,{t},allocate,{:#x},{s},0\n", (i + 1) << 40));
        t += 1;
    }
    for (i, s) in sizes.iter().enumerate() {
        csv.push_str(&format!("1,{t},free,{:#x},{s},0\n", (i + 1) << 40));
        t += 1;
    }
    let p = dir.path().join(name);
    std::fs::write(&p, csv).unwrap();
    p
}

fn holding(dir: &tempfile::TempDir, gib: f64) -> PathBuf {
    let bytes = (gib * GIB) as u64 / (2 * MIB) * (2 * MIB);
    trace(dir, &format!("hold-{gib}.csv"), &[bytes])
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn request(traces: Vec<PathBuf>, gpu: &str) -> PredictRequest {
    PredictRequest {
        traces,
        gpu: gpu.into(),
        conf: Some(String::new()),
        threads: Some(1),
        ..PredictRequest::default()
    }
}

/// A job holding `over` GiB is not "fits" on `gpu`, and one holding `under` GiB is.
fn held_out(gpu: &str, over: f64, under: f64) {
    let dir = tempfile::tempdir().unwrap();
    {
        let p = predict_in(&request(vec![holding(&dir, over)], gpu), &no_env).unwrap();
        assert!(
            !matches!(p.verdict(), Verdict::Fits { .. }),
            "{over} GiB on {gpu}: {:?}\n{}",
            p.verdict(),
            p.text()
        );
        assert_ne!(p.exit_status(), EXIT_FITS);
        assert!(!p.text().starts_with("fits"), "{}", p.text());
        let p = predict_in(&request(vec![holding(&dir, under)], gpu), &no_env).unwrap();
        assert!(
            matches!(p.verdict(), Verdict::Fits { .. }),
            "{under} GiB on {gpu}: {:?}\n{}",
            p.verdict(),
            p.text()
        );
        assert_eq!(p.exit_status(), EXIT_FITS);
        assert!(p.text().starts_with("fits on "), "{}", p.text());
        assert_eq!(p.advice, Advice::Keep, "{}", p.text());
    }
}

#[test]
fn held_out_h100() {
    held_out("h100", 79.1, 70.0);
}

fn h100_model() -> (u64, u64, u64, u64) {
    let g = cachalot_app::gpus::find("h100").unwrap();
    let o = Outside::model(g, &RankOutside::default(), &no_env);
    (g.usable, o.low(), o.bytes(), o.high())
}

#[test]
fn within_the_estimates_range_the_verdict_is_tight_and_says_by_how_much() {
    let dir = tempfile::tempdir().unwrap();
    let (total, low, est, high) = h100_model();
    // Peak reserved between CUDA's total less the high end and less the low end.
    let peak = (total - (low + high) / 2) / (2 * MIB) * (2 * MIB);
    let t = trace(&dir, "tight.csv", &[peak]);
    let p = predict_in(&request(vec![t], "h100"), &no_env).unwrap();
    let Verdict::Tight {
        margin,
        uncertainty,
    } = p.verdict()
    else {
        panic!("{:?}\n{}", p.verdict(), p.text());
    };
    assert_eq!(
        margin,
        i128::from(total) - i128::from(peak) - i128::from(est)
    );
    assert_eq!(uncertainty, high - low);
    assert_eq!(p.exit_status(), EXIT_TIGHT);
    let text = p.text();
    assert!(text.starts_with("tight on NVIDIA H100"), "{text}");
    assert!(text.contains("uncertain by"), "{text}");
    let j = p.json();
    assert_eq!(j["verdict"], "tight");
    assert_eq!(j["exit_status"], EXIT_TIGHT);
    assert_eq!(j["fits"], false);
    assert_eq!(j["margin_bytes"], i64::try_from(margin).unwrap());
    assert_eq!(j["outside_torch_bytes"]["estimate"], est);
    assert_eq!(
        j["outside_torch_bytes"]["parts"].as_array().unwrap().len(),
        2
    );
}

#[test]
fn nothing_fits_names_what_is_missing_and_the_config_closest_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (total, ..) = h100_model();
    let t = trace(&dir, "big.csv", &[total + (4 << 30)]);
    let p = predict_in(&request(vec![t], "h100"), &no_env).unwrap();
    let Verdict::DoesNotFit { missing: Some(m) } = p.verdict() else {
        panic!("{:?}", p.verdict());
    };
    assert!(m >= 4 << 30, "{m}");
    assert_eq!(p.exit_status(), EXIT_DOES_NOT_FIT);
    let Advice::Closest {
        conf,
        needs: Some(needs),
        missing: Some(missing),
    } = &p.advice
    else {
        panic!("{:?}", p.advice);
    };
    // The closest in memory is the configuration with the least minimum capacity, never one
    // that only lowers a ratio.
    assert!(!conf.contains("per_process_memory_fraction"), "{conf}");
    assert_eq!(p.best_min.1, *conf);
    assert_eq!(*missing, needs - total);
    assert!(
        p.text().starts_with("does not fit on NVIDIA H100"),
        "{}",
        p.text()
    );
    assert!(p.text().contains("nothing fits"), "{}", p.text());
    assert!(
        !p.text().contains("per_process_memory_fraction"),
        "{}",
        p.text()
    );
    assert!(p.smallest_gpu.unwrap().usable > total);
}

/// Growing requests, each freed before the next: torch's default caches a segment of each
/// size, expandable segments grow one, so another configuration saves a material amount.
fn growing(dir: &tempfile::TempDir) -> PathBuf {
    let mut ops = Vec::new();
    for (i, mib) in (11..=200u64).enumerate() {
        ops.push((true, i as u64, mib * MIB));
        ops.push((false, i as u64, mib * MIB));
    }
    rows(dir, "growing.csv", &ops)
}

#[test]
fn a_config_is_advised_only_for_a_material_gain() {
    let dir = tempfile::tempdir().unwrap();
    let p = predict_in(&request(vec![growing(&dir)], "h100"), &no_env).unwrap();
    assert!(matches!(p.verdict(), Verdict::Fits { .. }), "{}", p.text());
    let Advice::Change {
        conf,
        saves,
        makes_it_fit,
        ..
    } = &p.advice
    else {
        panic!("{:?}\n{}", p.advice, p.text());
    };
    assert!(!conf.is_empty() && !makes_it_fit);
    assert!(material(*saves, p.ranks[0].peak_reserved), "{saves}");
    assert!(
        p.text()
            .contains(&format!("advice: set PYTORCH_CUDA_ALLOC_CONF={conf}"))
    );
    // The same job under the configuration advised: nothing material left to gain.
    let mut req = request(vec![growing(&dir)], "h100");
    req.conf = Some(conf.clone());
    let p = predict_in(&req, &no_env).unwrap();
    assert_eq!(p.advice, Advice::Keep, "{}", p.text());
    assert!(
        p.text().contains("advice: keep PYTORCH_CUDA_ALLOC_CONF="),
        "{}",
        p.text()
    );
}

#[test]
fn material_means_five_percent_and_256_mib() {
    assert!(!material(255 * MIB, 1 << 30));
    assert!(material(256 * MIB, 1 << 30));
    assert!(!material(1 << 30, 40 << 30)); // 2.5 %
    assert!(material(2 << 30, 40 << 30));
}

#[test]
fn a_config_that_makes_it_fit_is_advised() {
    // The growing trace needs its sum under the default, little with expandable segments:
    // on a GPU left with 1 GiB for the allocator (an exact --reserve) only the change fits.
    let dir = tempfile::tempdir().unwrap();
    let (total, ..) = h100_model();
    let mut req = request(vec![growing(&dir)], "h100");
    req.reserve = Some(total - (1 << 30));
    let p = predict_in(&req, &no_env).unwrap();
    assert!(!matches!(p.verdict(), Verdict::Fits { .. }), "{}", p.text());
    let Advice::Change { makes_it_fit, .. } = &p.advice else {
        panic!("{:?}\n{}", p.advice, p.text());
    };
    assert!(makes_it_fit, "{}", p.text());
    assert!(p.text().contains(", which fits"), "{}", p.text());
    let j = p.json();
    assert_eq!(
        j["outside_torch_bytes"]["parts"][0]["name"],
        "reserved (--reserve)"
    );
    assert_eq!(
        j["outside_torch_bytes"]["low"],
        j["outside_torch_bytes"]["high"]
    );
}

#[test]
fn the_worst_rank_decides_and_each_rank_has_its_outside_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (total, _, _, high) = h100_model();
    // Rank 1 fits alone, but not with two 8-rank communicators' buffers beside it.
    let fit = (total - high - (1 << 30)) / (2 * MIB) * (2 * MIB);
    let r0 = trace(&dir, "r0.csv", &[8 << 30]);
    let r1 = trace(&dir, "r1.csv", &[fit]);
    let comm = Communicator {
        ranks: 8,
        buffsize: None,
        channels: None,
    };
    let mut req = request(vec![r0.clone(), r1.clone()], "h100");
    req.outside = vec![
        RankOutside::default(),
        RankOutside {
            nccl: vec![comm.clone(), comm],
            ..RankOutside::default()
        },
    ];
    let p = predict_in(&req, &no_env).unwrap();
    assert_eq!(p.ranks.len(), 2);
    assert!(matches!(p.ranks[0].verdict, Verdict::Fits { .. }));
    assert!(!matches!(p.ranks[1].verdict, Verdict::Fits { .. }));
    assert!(std::ptr::eq(p.worst(), &p.ranks[1]));
    assert_eq!(p.ranks[1].outside.parts.len(), 4);
    assert!(p.text().contains("(rank 1 decides)"), "{}", p.text());
    let j = p.json();
    assert_eq!(j["ranks"].as_array().unwrap().len(), 2);
    assert_eq!(j["peak_reserved"], p.ranks[1].peak_reserved);
    assert_eq!(j["capacity"], p.ranks[1].capacity);
    // Without the communicators both fit.
    req.outside.clear();
    let p = predict_in(&req, &no_env).unwrap();
    assert!(matches!(p.verdict(), Verdict::Fits { .. }), "{}", p.text());
    // One entry per rank, or none.
    req.outside = vec![RankOutside::default()];
    let e = predict_in(&req, &no_env).err().unwrap().to_string();
    assert!(e.contains("1 outside-torch entries for 2 traces"), "{e}");
}

#[test]
fn the_configuration_is_the_environments_as_torch_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut req = request(vec![growing(&dir)], "h100");
    req.conf = None;
    // An empty PYTORCH_CUDA_ALLOC_CONF is set: torch reads it (the defaults) and never looks
    // at PYTORCH_ALLOC_CONF.
    let env = |k: &str| match k {
        "PYTORCH_CUDA_ALLOC_CONF" => Some(String::new()),
        "PYTORCH_ALLOC_CONF" => Some("expandable_segments:True".into()),
        _ => None,
    };
    let p = predict_in(&req, &env).unwrap();
    assert_eq!(p.conf, "");
    let env = |k: &str| (k == "PYTORCH_ALLOC_CONF").then(|| "expandable_segments:True".into());
    let p = predict_in(&req, &env).unwrap();
    assert_eq!(p.conf, "expandable_segments:True");
    let env = |k: &str| (k == "PYTORCH_CUDA_ALLOC_CONF").then(|| "bogus:1".into());
    let e = format!("{:#}", predict_in(&req, &env).err().unwrap());
    assert!(e.contains("bogus"), "{e}");
}

#[test]
fn bad_requests_are_errors_that_name_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(&dir, "t.csv", &[1 << 30]);
    let e = predict_in(&request(vec![t.clone()], "h1000"), &no_env)
        .err()
        .unwrap();
    assert!(e.to_string().contains("'h1000'"), "{e}");
    let e = predict_in(&request(vec![], "h100"), &no_env).err().unwrap();
    assert!(e.to_string().contains("at least one trace"), "{e}");
    let mut req = request(vec![t], "h100");
    req.reserve = Some(1 << 50);
    let e = predict_in(&req, &no_env).err().unwrap();
    assert!(e.to_string().contains("leaves nothing of h100"), "{e}");
    let missing = dir.path().join("none.csv");
    let e = predict_in(&request(vec![missing], "h100"), &no_env)
        .err()
        .unwrap();
    assert!(e.to_string().contains("does not exist"), "{e}");
}

#[test]
fn held_out_rtx4090() {
    held_out("rtx4090", 23.5, 20.0);
}
