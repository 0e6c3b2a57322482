//! The GPU table held to its sources: every CUDA total is quoted by its source (exact bytes or
//! torch's two-decimal GiB) or follows its estimate rule from a measured card; the figures are
//! sane for the card (below its nominal size, SMs and L2 within what its chip has, shared
//! memory as its compute capability gives); every name finds one card only.

use cachalot_app::gpus::{ALIAS_NOTES, Evidence, GPUS, Gpu, find};

const GIB: f64 = (1u64 << 30) as f64;

/// The most SMs and L2 (MiB) the chip has, by the chip named in `arch`.
fn chip_limits(arch: &str) -> (u32, u64) {
    let chip = arch.rsplit(' ').next().unwrap();
    match chip {
        "GV100" => (84, 6),
        "TU104" => (48, 4),
        "GA100" => (128, 48),
        "GA102" => (84, 6),
        "AD102" => (144, 96),
        "AD103" => (80, 64),
        "AD104" => (60, 48),
        "GH100" => (144, 60),
        "GB100" => (160, 128),
        "GB202" => (192, 128),
        "GB203" => (84, 64),
        other => panic!("{arch}: no limits for chip {other}"),
    }
}

/// Shared memory per SM and per-block opt-in (KiB) by compute capability.
fn smem_kib(cc: (u32, u32)) -> (u64, u64) {
    match cc {
        (7, 0) => (96, 96),
        (7, 5) => (64, 64),
        (8, 0) => (164, 163),
        (8, 6) | (8, 9) | (12, 0) => (100, 99),
        (9, 0) | (10, 0) => (228, 227),
        other => panic!("no shared-memory figures for compute capability {other:?}"),
    }
}

fn get(key: &str) -> &'static Gpu {
    GPUS.iter().find(|g| g.key() == key).unwrap()
}

#[test]
fn every_total_is_its_sources_figure_or_follows_its_estimate_rule() {
    for g in GPUS {
        let k = g.key();
        match g.evidence {
            Evidence::Exact => assert!(
                g.source.contains(&g.usable.to_string()),
                "{k}: the source does not quote {} bytes: {}",
                g.usable,
                g.source
            ),
            Evidence::Torch => {
                let shown = format!("{:.2} GiB", g.usable as f64 / GIB);
                assert!(
                    g.source.starts_with("torch:") || g.source.contains("GB\" in GiB"),
                    "{k}"
                );
                assert!(
                    g.source.contains(&shown) || g.source.contains(&shown.replace(" GiB", " GB")),
                    "{k}: the source does not quote {shown}: {}",
                    g.source
                );
            }
            Evidence::Estimate { like } => {
                let m = get(like);
                assert!(
                    !m.is_estimate(),
                    "{k}: estimated from another estimate ({like})"
                );
                assert_eq!(
                    g.usable,
                    g.nominal - (m.nominal - m.usable),
                    "{k}: not nominal less the driver's share on {like}"
                );
                assert!(g.source.starts_with("estimate:"), "{k}: {}", g.source);
                assert_eq!(g.cc.0, m.cc.0, "{k}: estimated from another architecture");
            }
        }
        // Every source names where it was published: an issue, a file or a document.
        if !g.is_estimate() {
            assert!(
                g.source.contains('#') || g.source.contains('/') || g.source.contains(".io"),
                "{k}: no place named in {}",
                g.source
            );
        }
    }
}

#[test]
fn figures_are_sane_for_each_card() {
    for g in GPUS {
        let k = g.key();
        // CUDA's total is below the size the card is sold with, by what ECC and the driver
        // take (at most 10 %).
        assert!(g.usable < g.nominal, "{k}");
        assert!(g.usable as f64 > 0.90 * g.nominal as f64, "{k}");
        let (max_sms, max_l2) = chip_limits(g.arch);
        assert!(g.sms > 0 && g.sms <= max_sms, "{k}: {} SMs", g.sms);
        assert!(g.l2 >= 4 << 20 && g.l2 <= max_l2 << 20, "{k}: L2 {}", g.l2);
        assert_eq!(
            smem_kib(g.cc),
            (g.smem_per_sm >> 10, g.smem_optin >> 10),
            "{k}: shared memory"
        );
    }
}

#[test]
fn every_name_and_device_name_finds_its_own_card_only() {
    let mut seen: Vec<String> = Vec::new();
    for g in GPUS {
        for n in g.names.iter().chain(std::iter::once(&g.device_name)) {
            assert_eq!(find(n).unwrap().key(), g.key(), "{n}");
            let norm: String = n
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .collect::<String>()
                .to_lowercase();
            if *n != g.device_name {
                assert!(!seen.contains(&norm), "{n} names two cards");
                seen.push(norm);
            }
        }
    }
    for (alias, note) in ALIAS_NOTES {
        let g = find(alias).unwrap();
        assert!(note.contains(alias), "{alias}: {note}");
        assert!(g.names.contains(alias), "{alias}");
    }
    assert!(
        GPUS.windows(2)
            .all(|w| (w[0].usable, w[0].key()) < (w[1].usable, w[1].key())),
        "the table is ordered by memory, then key"
    );
}

#[test]
fn the_cards_users_own_are_there() {
    for key in [
        "v100-16gb",
        "v100-32gb",
        "a100-40gb",
        "a100-40gb-pcie",
        "a100-80gb",
        "a100-80gb-pcie",
        "a10",
        "a10g",
        "l4",
        "l40",
        "l40s",
        "h100-pcie",
        "h100",
        "h100-nvl",
        "h200",
        "gh200",
        "b200",
        "rtx3090",
        "rtx3090ti",
        "rtx4080",
        "rtx4090",
        "rtx5080",
        "rtx5090",
        "a6000",
        "rtx6000-ada",
    ] {
        assert!(GPUS.iter().any(|g| g.key() == key), "{key}");
    }
    // The held-out figures the issue names: an 80 GB H100 and an RTX 4090 as torch shows them.
    // As torch prints them, to two decimals.
    let gib = |k: &str| (get(k).usable as f64 / GIB * 100.0).round() / 100.0;
    assert!((79.11..=79.33).contains(&gib("h100")), "{}", gib("h100"));
    assert!(
        (23.52..=23.65).contains(&gib("rtx4090")),
        "{}",
        gib("rtx4090")
    );
}
