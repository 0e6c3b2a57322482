//! `tune`: searching the configuration space at one capacity.
//!
//! The search runs in rounds; each round's candidates depend only on exact results of
//! earlier rounds, so the answer does not depend on timing or the number of threads:
//!
//! 1. the default and the common advice (`max_split_size_mb:128`, `expandable_segments:True`),
//!    always replayed to the end;
//! 2. every option alone ([`SearchSpace::singles`]);
//! 3. every combination of the values that appear in the best `top` so far (at most two set
//!    values per dimension, plus unset);
//! 4. coordinate descent: every configuration one option away from the best, repeated while
//!    the best changes (at most four times).
//!
//! Replays in a round run in parallel. A replay is cut short as soon as its running ranking
//! key ranks below the `top`-th best finished one (OOMs, retries, device-call time and peak
//! reserved only grow during a replay, so it cannot end better), counting in the
//! out-of-memory errors and retries still ahead that are certain: requests that no device of
//! the capacity can serve ([`cachalot_core::bounds::doomed_request`]). The best `top` distinct
//! results are exact, whatever finishes first. A result equal to a better-ranked one's is kept
//! only in its simplest form.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use cachalot_core::config::TorchVersion;
use rayon::prelude::*;

use crate::cost::CostModel;
use crate::measure::{Evaluated, Metrics, Outcome, RankKey, evaluate, measure};
use crate::space::{Candidate, Roundup, SearchSpace, Settings, Twins, dedup};
use crate::{AdvisorError, Workload, check_capacity, check_trace, with_pool};

/// Progress of a search, for a progress bar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tick {
    /// This many more replays (or bisections) are queued.
    Added(usize),
    /// One finished.
    Done,
}

/// How to search.
#[derive(Clone)]
pub struct TuneOptions<'a> {
    /// Device capacity, bytes.
    pub capacity: u64,
    /// The cost model.
    pub cost: CostModel,
    /// Worker threads (`None`: all cores).
    pub threads: Option<usize>,
    /// How many of the best are kept exact (and shown).
    pub top: usize,
    /// Called as work is queued and done.
    pub progress: Option<&'a (dyn Fn(Tick) + Sync)>,
    /// The user's own configuration (e.g. the one a snapshot recorded): replayed to the end
    /// and shown with its rank.
    pub own: Option<Candidate>,
    /// The torch release the recommendation is for: the search keeps to what it accepts and
    /// what cachalot replays of its decisions, and every replay (search, exact re-ranking,
    /// minimum capacity, the user's own line) makes its decisions ([`SearchSpace::for_release`]).
    pub release: TorchVersion,
}

impl TuneOptions<'_> {
    /// Defaults at `capacity`: the default cost model, all cores, the best 8.
    pub fn at(capacity: u64) -> Self {
        TuneOptions {
            capacity,
            cost: CostModel::default(),
            threads: None,
            top: 8,
            progress: None,
            own: None,
            release: TorchVersion::NEWEST,
        }
    }
}

/// What a search found.
#[derive(Clone, Debug)]
pub struct TuneResult {
    /// Device capacity, bytes.
    pub capacity: u64,
    /// The best `top`, best first (the first is the recommendation).
    pub ranking: Vec<Evaluated>,
    /// The default configuration.
    pub default: Evaluated,
    /// The common advice: `max_split_size_mb:128`, `expandable_segments:True`.
    pub advice: Vec<Evaluated>,
    /// The user's own configuration ([`TuneOptions::own`]), replayed to the end.
    pub own: Option<Evaluated>,
    /// Whether the recommendation fits, and if not, what it would need.
    pub fit: Fit,
    /// Configurations examined.
    pub searched: usize,
    /// Search statistics that depend on timing (replays cut short, wall time).
    pub stats: SearchStats,
}

/// Whether the best configuration runs without out-of-memory at the capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// It does.
    Fits,
    /// It does not; it needs a device of this many bytes (its minimum capacity).
    Needs(u64),
    /// It does not, even on the largest device tried ([`crate::capacity::large_device`]).
    Never,
}

impl Fit {
    /// The bytes missing at `capacity`, when the best configuration does not fit.
    pub fn shortfall(&self, capacity: u64) -> Option<u64> {
        match *self {
            Fit::Needs(c) => Some(c.saturating_sub(capacity)),
            _ => None,
        }
    }
}

/// Numbers about the search itself; they vary from run to run.
#[derive(Clone, Debug, Default)]
pub struct SearchStats {
    /// Replays run.
    pub replays: usize,
    /// Replays cut short because they could no longer reach the best `top`.
    pub cut_short: usize,
    /// Configurations given the numbers of a twin's replay instead of their own
    /// ([`crate::space::Twins`]).
    pub shared: usize,
    /// Wall time of the search.
    pub elapsed: Duration,
}

impl TuneResult {
    /// The recommendation.
    pub fn winner(&self) -> &Evaluated {
        &self.ranking[0]
    }

    /// The rank (from 1) of a configuration in the ranking, if it is in it.
    pub fn rank_of(&self, label: &str) -> Option<usize> {
        self.ranking
            .iter()
            .position(|e| e.candidate.label == label)
            .map(|i| i + 1)
    }
}

/// The search driver shared by `tune` and `min_capacity`: rounds of candidates, each round
/// built from the best `top` of the exact results so far. Results that are `same` as a better
/// (or equally good and simpler) one are dropped: a configuration that behaves exactly like a
/// simpler one is dominated. `eval` evaluates a round (in any
/// order, returning `None` for candidates it proved cannot reach the best `top`) and sees the
/// best result of earlier rounds. Returns the best `top`, best first, and how many candidates
/// were examined.
pub(crate) fn explore<S: Clone>(
    space: &SearchSpace,
    initial: Vec<(Candidate, S)>,
    top: usize,
    order: impl Fn(&(Candidate, S), &(Candidate, S)) -> std::cmp::Ordering,
    same: impl Fn(&S, &S) -> bool,
    mut eval: impl FnMut(
        Vec<Candidate>,
        Option<&(Candidate, S)>,
    ) -> Result<Vec<(Candidate, Option<S>)>, AdvisorError>,
) -> Result<(Vec<(Candidate, S)>, usize), AdvisorError> {
    let top = top.max(1);
    let mut tried: std::collections::HashSet<Settings> =
        initial.iter().filter_map(|(c, _)| c.settings).collect();
    let mut exact = initial;
    exact.sort_by(&order);
    // Keeps the first (best, then simplest) of each distinct result.
    let distinct = |v: &mut Vec<(Candidate, S)>| {
        let mut kept: Vec<(Candidate, S)> = Vec::with_capacity(v.len());
        for x in v.drain(..) {
            if !kept.iter().any(|k| same(&k.1, &x.1)) {
                kept.push(x);
            }
        }
        *v = kept;
    };
    let mut examined = 0;
    let mut round = |settings: Vec<Settings>,
                     exact: &mut Vec<(Candidate, S)>,
                     tried: &mut std::collections::HashSet<Settings>|
     -> Result<(), AdvisorError> {
        let fresh: Vec<Candidate> = dedup(settings)
            .into_iter()
            .filter(|s| space.allows(s) && tried.insert(*s))
            .map(|s| space.candidate(s))
            .collect::<Result<_, _>>()?;
        if fresh.is_empty() {
            return Ok(());
        }
        examined += fresh.len();
        let results = eval(fresh, exact.first())?;
        exact.extend(results.into_iter().filter_map(|(c, s)| s.map(|s| (c, s))));
        exact.sort_by(&order);
        distinct(exact);
        Ok(())
    };
    // Round 1: every option alone.
    round(space.singles(), &mut exact, &mut tried)?;
    // Round 2: combinations of the values in the best `top`.
    let best: Vec<Settings> = exact
        .iter()
        .take(top)
        .filter_map(|(c, _)| c.settings)
        .collect();
    let pick = |f: &dyn Fn(&Settings) -> bool| -> Vec<Settings> {
        best.iter().filter(|s| f(s)).copied().take(2).collect()
    };
    let mut max_split = vec![None];
    for s in pick(&|s| s.max_split_mb.is_some()) {
        max_split.push(s.max_split_mb);
    }
    let mut roundup = vec![Roundup::Off];
    let mut seen_r = Vec::new();
    for s in &best {
        if s.roundup != Roundup::Off && !seen_r.contains(&s.roundup) && seen_r.len() < 2 {
            seen_r.push(s.roundup);
        }
    }
    roundup.extend(seen_r);
    let mut expandable = vec![false];
    if best.iter().any(|s| s.expandable) {
        expandable.push(true);
    }
    let mut gc = vec![None];
    let mut seen_g = Vec::new();
    for s in &best {
        if s.gc.is_some() && !seen_g.contains(&s.gc) && seen_g.len() < 2 {
            seen_g.push(s.gc);
        }
    }
    gc.extend(seen_g);
    max_split.dedup();
    round(
        space.product(&max_split, &roundup, &expandable, &gc),
        &mut exact,
        &mut tried,
    )?;
    // Rounds 3+: coordinate descent from the best.
    for _ in 0..4 {
        let Some(base) = exact.first().and_then(|(c, _)| c.settings) else {
            break;
        };
        round(space.neighbours(&base), &mut exact, &mut tried)?;
        if exact.first().and_then(|(c, _)| c.settings) == Some(base) {
            break;
        }
    }
    exact.truncate(top);
    Ok((exact, examined))
}

/// The best `top` finished keys, for cutting replays short.
struct Leaders {
    top: usize,
    keys: Vec<(RankKey, usize, String)>,
}

impl Leaders {
    fn cmp(a: &(RankKey, usize, String), b: &(RankKey, usize, String)) -> std::cmp::Ordering {
        a.0.rank_cmp(&b.0)
            .then(a.1.cmp(&b.1))
            .then_with(|| a.2.cmp(&b.2))
    }

    fn insert(&mut self, k: (RankKey, usize, String)) {
        // One entry per distinct key: its best (simplest) configuration.
        if let Some(i) = self.keys.iter().position(|x| x.0 == k.0) {
            if Self::cmp(&k, &self.keys[i]) == std::cmp::Ordering::Less {
                self.keys.remove(i);
            } else {
                return;
            }
        }
        let pos = self
            .keys
            .partition_point(|x| Self::cmp(x, &k) == std::cmp::Ordering::Less);
        self.keys.insert(pos, k);
        self.keys.truncate(self.top);
    }

    /// Whether a candidate whose key is at least `key` can no longer reach the best `top`.
    fn beats(&self, key: &RankKey, c: &Candidate) -> bool {
        if self.keys.len() < self.top {
            return false;
        }
        let last = &self.keys[self.top - 1];
        let probe = (*key, c.complexity, c.label.clone());
        Self::cmp(&probe, last) == std::cmp::Ordering::Greater
    }
}

fn lock(m: &Mutex<Leaders>) -> std::sync::MutexGuard<'_, Leaders> {
    // A panic elsewhere leaves the list usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Searches the configuration space at `opts.capacity` and ranks what it finds.
pub fn tune(trace: &dyn Workload, opts: &TuneOptions) -> Result<TuneResult, AdvisorError> {
    tune_with_seeds(trace, opts, &[])
}

/// [`tune`] with extra configurations replayed to the end in the first round.
pub fn tune_with_seeds(
    trace: &dyn Workload,
    opts: &TuneOptions,
    extra: &[Settings],
) -> Result<TuneResult, AdvisorError> {
    check_trace(trace)?;
    check_capacity(opts.capacity)?;
    let start = Instant::now();
    let space = SearchSpace::for_trace(trace).for_release(opts.release);
    let top = opts.top.max(1);
    let leaders = Mutex::new(Leaders {
        top,
        keys: Vec::new(),
    });
    let twins = Twins::new(trace, &space, opts.capacity)?;
    let shared = Shared::default();
    let replays = std::sync::atomic::AtomicUsize::new(0);
    let cut = std::sync::atomic::AtomicUsize::new(0);
    let tick = |t: Tick| {
        if let Some(p) = opts.progress {
            p(t)
        }
    };
    let run = || -> Result<TuneResult, AdvisorError> {
        let mut seeds = vec![
            Settings::DEFAULT,
            Settings::ADVICE_MAX_SPLIT,
            Settings::ADVICE_EXPANDABLE,
        ];
        seeds.extend_from_slice(extra);
        seeds.retain(|s| space.allows(s));
        let seeds = dedup(seeds);
        let mut seed_cands: Vec<Candidate> = seeds
            .iter()
            .map(|s| space.candidate(*s))
            .collect::<Result<_, _>>()?;
        let own_at = opts.own.as_ref().map(|own| {
            let own = own.clone().for_torch(space.release);
            match seed_cands.iter().position(|c| c.conf == own.conf) {
                Some(i) => i,
                None => {
                    seed_cands.push(own);
                    seed_cands.len() - 1
                }
            }
        });
        tick(Tick::Added(seed_cands.len()));
        let seed_outcomes = shared.evaluate(&seed_cands, &twins, |candidate| {
            let metrics = measure(trace, candidate, opts.capacity, &opts.cost)?;
            replays.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(Outcome::Done(metrics))
        })?;
        let seed_results: Vec<Evaluated> = seed_cands
            .iter()
            .zip(seed_outcomes)
            .map(|(candidate, out)| {
                tick(Tick::Done);
                match out {
                    Outcome::Done(metrics) => Evaluated {
                        candidate: candidate.clone(),
                        metrics,
                    },
                    Outcome::Cut { .. } => unreachable!("seeds are replayed without a threshold"),
                }
            })
            .collect();
        {
            let mut l = lock(&leaders);
            for e in &seed_results {
                l.insert((
                    e.metrics.key(),
                    e.candidate.complexity,
                    e.candidate.label.clone(),
                ));
            }
        }
        let initial: Vec<(Candidate, Evaluated)> = seed_results
            .iter()
            .map(|e| (e.candidate.clone(), e.clone()))
            .collect();
        let (found, examined) = explore(
            &space,
            initial,
            top,
            |a, b| a.1.order(&b.1),
            |a, b| a.metrics.key() == b.metrics.key(),
            |cands, _best| {
                tick(Tick::Added(cands.len()));
                let outcomes = shared.evaluate(&cands, &twins, |c| {
                    let beaten = |k: &RankKey| lock(&leaders).beats(k, c);
                    let out = evaluate(trace, c, opts.capacity, &opts.cost, Some(&beaten))?;
                    replays.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    match &out {
                        Outcome::Done(metrics) => {
                            lock(&leaders).insert((metrics.key(), c.complexity, c.label.clone()))
                        }
                        Outcome::Cut { .. } => {
                            cut.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    Ok(out)
                })?;
                let mut l = lock(&leaders);
                Ok(cands
                    .into_iter()
                    .zip(outcomes)
                    .map(|(c, out)| {
                        tick(Tick::Done);
                        match out {
                            Outcome::Done(metrics) => {
                                l.insert((metrics.key(), c.complexity, c.label.clone()));
                                let e = Evaluated {
                                    candidate: c.clone(),
                                    metrics,
                                };
                                (c, Some(e))
                            }
                            Outcome::Cut { .. } => (c, None),
                        }
                    })
                    .collect())
            },
        )?;
        let ranking: Vec<Evaluated> = found.into_iter().map(|(_, e)| e).collect();
        Ok(TuneResult {
            capacity: opts.capacity,
            ranking,
            default: seed_results[0].clone(),
            advice: seed_results[1..3].to_vec(),
            own: own_at.map(|i| seed_results[i].clone()),
            fit: Fit::Fits,
            searched: seed_cands.len() + examined,
            stats: SearchStats::default(),
        })
    };
    let mut result = with_pool(opts.threads, run)??;
    if result.winner().metrics.ooms > 0 {
        let conf = &result.winner().candidate.conf;
        result.fit = match with_pool(opts.threads, || crate::min_capacity_of(trace, conf))?? {
            Some(c) => Fit::Needs(c),
            None => Fit::Never,
        };
    }
    result.stats = SearchStats {
        replays: replays.into_inner(),
        cut_short: cut.into_inner(),
        shared: shared.count.into_inner(),
        elapsed: start.elapsed(),
    };
    Ok(result)
}

/// The numbers of replays finished so far, by twin class ([`Twins::class_of`]), with the
/// configuration that was replayed.
#[derive(Default)]
struct Shared {
    known: Mutex<Known>,
    /// Candidates answered without a replay of their own.
    count: std::sync::atomic::AtomicUsize,
}

/// The classes that differ only in their garbage collection choice (threshold and fraction).
fn family(s: &Settings) -> Settings {
    Settings { gc: None, ..*s }
}

impl Shared {
    /// The outcome of each of `cands`, in order: one replay (`replay_one`, in parallel) per
    /// twin class not finished before, of its simplest member, whose outcome the others
    /// share. A candidate outside the search space is its own class. When the simplest
    /// member is cut short, so are its twins: they end with the same key, which ranks after
    /// it, and the threshold it lost to only gets tighter.
    ///
    /// Classes that differ only in the garbage collection choice (a family) are replayed one
    /// at a time, simplest first: each is answered by a finished member whose replay proves
    /// it alike ([`cachalot_core::bounds::LimitFacts::alike`]: no check of the fraction limit
    /// and no garbage collection would have gone otherwise), or replayed.
    fn evaluate(
        &self,
        cands: &[Candidate],
        twins: &Twins,
        replay_one: impl Fn(&Candidate) -> Result<Outcome, AdvisorError> + Sync,
    ) -> Result<Vec<Outcome>, AdvisorError> {
        let class: Vec<Option<Settings>> = cands
            .iter()
            .map(|c| c.settings.map(|s| twins.class_of(&s)))
            .collect();
        // For each candidate: the index in `reps` of the replay that answers it, or `None`
        // when a finished replay of its class already does.
        let mut answer: Vec<Option<usize>> = Vec::with_capacity(cands.len());
        let mut reps: Vec<usize> = Vec::new();
        {
            let known = lock_known(&self.known);
            let mut first: std::collections::HashMap<Settings, usize> = Default::default();
            for (i, k) in class.iter().enumerate() {
                let Some(k) = k else {
                    answer.push(Some(reps.len()));
                    reps.push(i);
                    continue;
                };
                if known.contains_key(k) {
                    answer.push(None);
                } else if let Some(&r) = first.get(k) {
                    if cands[i].order_key() < cands[reps[r]].order_key() {
                        reps[r] = i;
                    }
                    answer.push(Some(r));
                } else {
                    first.insert(*k, reps.len());
                    answer.push(Some(reps.len()));
                    reps.push(i);
                }
            }
        }
        // Waves of replays: each answers first what the finished prove, then replays the
        // classes outside the space and the first class left of each family.
        let mut outcomes: Vec<Option<Outcome>> = vec![None; reps.len()];
        let mut proven = 0;
        let mut pending: Vec<usize> = (0..reps.len()).collect();
        loop {
            pending.retain(|&r| {
                let i = reps[r];
                let Some(m) = self.proven_alike(&cands[i], class[i]) else {
                    return true;
                };
                if let (Some(k), Some(s)) = (class[i], cands[i].settings) {
                    lock_known(&self.known).insert(k, (s, m.clone()));
                }
                outcomes[r] = Some(Outcome::Done(m));
                proven += 1;
                false
            });
            if pending.is_empty() {
                break;
            }
            let mut wave: Vec<usize> = Vec::new();
            pending.retain(|&r| {
                let first_of_family = match class[reps[r]] {
                    None => true,
                    Some(k) => !wave
                        .iter()
                        .any(|&w| class[reps[w]].is_some_and(|x| family(&x) == family(&k))),
                };
                if first_of_family {
                    wave.push(r);
                }
                !first_of_family
            });
            self.run_wave(&wave, &reps, cands, &class, &replay_one, &mut outcomes)?;
        }
        self.count.fetch_add(
            cands.len() - reps.len() + proven,
            std::sync::atomic::Ordering::Relaxed,
        );
        let known = lock_known(&self.known);
        Ok(answer
            .iter()
            .zip(&class)
            .map(|(a, k)| match (a, k) {
                (Some(r), _) => outcomes[*r].clone().expect("every replay of a class ran"),
                (None, Some(k)) => Outcome::Done(known[k].1.clone()),
                (None, None) => unreachable!("a candidate without a class is replayed"),
            })
            .collect())
    }

    /// Replays the classes `wave` (indexes into `reps`) in parallel and records the finished.
    fn run_wave(
        &self,
        wave: &[usize],
        reps: &[usize],
        cands: &[Candidate],
        class: &[Option<Settings>],
        replay_one: &(impl Fn(&Candidate) -> Result<Outcome, AdvisorError> + Sync),
        outcomes: &mut [Option<Outcome>],
    ) -> Result<(), AdvisorError> {
        // Replays cut short by a stop would pass for results: the search ends here instead.
        cachalot_replay::interrupt::check()?;
        let done: Vec<Outcome> = wave
            .par_iter()
            .map(|&r| replay_one(&cands[reps[r]]))
            .collect::<Result<_, _>>()?;
        cachalot_replay::interrupt::check()?;
        let mut known = lock_known(&self.known);
        for (&r, out) in wave.iter().zip(done) {
            let i = reps[r];
            if let (Some(k), Some(s), Outcome::Done(m)) = (class[i], cands[i].settings, &out) {
                known.insert(k, (s, m.clone()));
            }
            outcomes[r] = Some(out);
        }
        Ok(())
    }

    /// The numbers of a finished member of `c`'s family whose replay proves that `c`
    /// replays alike.
    fn proven_alike(&self, c: &Candidate, class: Option<Settings>) -> Option<Metrics> {
        let f = family(&class?);
        let known = lock_known(&self.known);
        let mut members: Vec<(Candidate, &Metrics)> = known
            .iter()
            .filter(|(k, _)| family(k) == f)
            .filter_map(|(_, (s, m))| Some((Candidate::from_settings(*s).ok()?, m)))
            .collect();
        // Whatever the map's order, the same member answers.
        members.sort_by(|a, b| a.0.order_key().cmp(&b.0.order_key()));
        members.into_iter().find_map(|(replayed, m)| {
            let facts = m.limits?;
            facts.alike(&replayed.conf, &c.conf).then(|| m.clone())
        })
    }
}

type Known = std::collections::HashMap<Settings, (Settings, Metrics)>;

fn lock_known(m: &Mutex<Known>) -> std::sync::MutexGuard<'_, Known> {
    // A panic elsewhere leaves the map usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
