//! The torch-version table (`config::versions`) against what each release's own libraries
//! say: `tests/fixtures/torch-versions/keys.txt`, written by `scripts/versions/survey_keys.sh`
//! from the key names compiled into each torch wheel's parser.

use cachalot_core::config::{KEYS, TorchVersion};

fn survey() -> Vec<(TorchVersion, Vec<String>, u64)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/torch-versions/keys.txt"
    );
    let text = std::fs::read_to_string(path).expect("the survey file");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (version, rest) = l.split_once(':').expect("release: keys | minimum");
            let (keys, minimum) = rest.split_once('|').expect("keys | minimum");
            // "> " (strictly greater than 20) in the CUDA pass wins where both texts are there
            let min = if minimum.contains("must be > ") {
                21
            } else {
                20
            };
            let keys = keys.split_whitespace().map(str::to_string).collect();
            (version.parse().expect("a release"), keys, min)
        })
        .collect()
}

#[test]
fn the_survey_covers_every_release_of_the_table() {
    let releases: Vec<_> = survey().into_iter().map(|(v, _, _)| v).collect();
    assert_eq!(releases, TorchVersion::all().collect::<Vec<_>>());
}

#[test]
fn each_release_accepts_exactly_the_keys_its_parser_knows() {
    let names: Vec<&str> = KEYS
        .iter()
        .filter(|k| !k.cachalot_only && !k.legacy)
        .flat_map(|k| std::iter::once(k.name).chain(k.aliases.iter().copied()))
        .collect();
    for (version, known, _) in survey() {
        for name in &names {
            let in_binary = known.iter().any(|k| k == name);
            assert_eq!(
                version.accepts_key(name),
                in_binary,
                "torch {version}: `{name}` (in its parser: {in_binary})"
            );
        }
    }
}

#[test]
fn each_release_has_its_parsers_split_minimum() {
    for (version, _, min) in survey() {
        assert_eq!(version.min_split_mb(), min, "torch {version}");
        let below = format!("max_split_size_mb:{}", min - 1);
        assert!(
            version.check(&below).iter().any(|n| n.is_rejection()),
            "{version}"
        );
        assert!(
            !version
                .check(&format!("max_split_size_mb:{min}"))
                .iter()
                .any(|n| n.is_rejection())
        );
    }
}
