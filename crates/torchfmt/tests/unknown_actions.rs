//! Issue #10, crash 4: the reader counted unknown history actions with a linear search of the
//! ones seen so far, so a snapshot with many distinct unknown actions took quadratic time
//! (80,000 in a 1.1 MB pickle: 50 s; 200,000 never finished). Counting is now one lookup per
//! entry; this test reads 200,000 distinct ones (minutes before the fix) and checks the counts.

use cachalot_torchfmt::read_snapshot;

#[test]
fn many_distinct_unknown_actions_are_counted_in_order() {
    let n = 200_000;
    let mut json = String::from(r#"{"segments": [], "device_traces": [["#);
    for i in 0..n {
        if i > 0 {
            json.push(',');
        }
        json.push_str(&format!(r#"{{"action": "custom_{i}"}}"#));
    }
    json.push_str(r#",{"action": "custom_7"}]]}"#);
    let snap = read_snapshot(json.as_bytes()).unwrap();
    let skipped = &snap.device_traces[0].skipped;
    assert_eq!(skipped.len(), n);
    assert_eq!(skipped[0], ("custom_0".to_string(), 1));
    assert_eq!(skipped[7], ("custom_7".to_string(), 2));
    assert_eq!(skipped[n - 1].0, format!("custom_{}", n - 1));
}
