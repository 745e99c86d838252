use std::time::Duration;

use tokio::time::Instant;

use super::*;

fn pool(cap: u64, per_client: u64) -> Arc<Pool> {
    Arc::new(Pool::new(
        Budget::EventBytes,
        BudgetLimits { cap, per_client },
    ))
}

fn address(last: u8) -> Client {
    Client::Address(IpAddr::from([10, 0, 0, last]))
}

#[test]
fn a_lease_holds_its_client_within_its_share_and_the_cap_and_gives_all_back() {
    let pool = pool(100, 60);
    let mut a = Lease::on(&pool, address(1));
    assert_eq!(a.grow(60), Ok(()));
    assert_eq!(a.grow(1), Err(Spent::Share), "over its share");
    let mut b = Lease::on(&pool, address(2));
    assert_eq!(
        b.grow(41),
        Err(Spent::Cap),
        "within its share, over the cap"
    );
    assert_eq!(b.grow(40), Ok(()));
    assert_eq!(pool.figures().used, 100);
    assert_eq!(pool.figures().refused, [1, 1]);
    a.shrink(10);
    assert_eq!(pool.held_by(&address(1)), 50);
    drop(a);
    drop(b);
    let figures = pool.figures();
    assert_eq!(figures.used, 0);
    assert_eq!(pool.held_by(&address(1)), 0, "no entry is left");
}

#[test]
fn a_client_unknown_has_no_share_only_the_cap() {
    let pool = pool(100, 10);
    let mut unknown = Lease::on(&pool, Client::Unknown);
    assert_eq!(unknown.grow(100), Ok(()));
    assert_eq!(unknown.grow(1), Err(Spent::Cap));
}

#[test]
fn two_leases_of_one_client_share_its_share() {
    let pool = pool(100, 30);
    let mut first = Lease::on(&pool, address(1));
    let mut second = Lease::on(&pool, address(1));
    assert_eq!(first.grow(20), Ok(()));
    assert_eq!(second.grow(11), Err(Spent::Share));
    assert_eq!(second.resize(10), Ok(()));
    assert_eq!(second.resize(2), Ok(()));
    assert_eq!(pool.held_by(&address(1)), 22);
}

#[tokio::test(start_paused = true)]
async fn only_a_client_over_its_share_waits_and_a_full_cap_is_never_waited_for() {
    let pool = pool(100, 60);
    let mut a = Lease::on(&pool, address(1));
    a.grow(60).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut more = Lease::on(&pool, address(1));
    let freed = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        a.shrink(30);
    };
    let (waited, ()) = tokio::join!(more.grow_waiting(30, deadline), freed);
    assert_eq!(waited, Ok(true));
    assert_eq!(
        Instant::now(),
        deadline - Duration::from_secs(3),
        "as soon as room came"
    );
    // B within its share, the cap full: refused at once, never waits.
    let mut b = Lease::on(&pool, address(2));
    let started = Instant::now();
    assert_eq!(b.grow_waiting(41, deadline).await, Err(Spent::Cap));
    assert_eq!(started.elapsed(), Duration::ZERO);
    // Over its share with nothing given back: refused at the deadline.
    assert_eq!(more.grow_waiting(1, deadline).await, Err(Spent::Share));
    assert_eq!(Instant::now(), deadline);
}

#[tokio::test(start_paused = true)]
async fn a_rate_refuses_a_client_past_its_quarter_second_and_refills() {
    let rate = Arc::new(Rate::new(
        Budget::Inflate,
        BudgetLimits {
            cap: 4000,
            per_client: 1600,
        },
    ));
    // A quarter second's worth at once: 400 of a client's share, 1000 of the cap.
    let mut a = RateUse::new(rate.clone(), address(1));
    assert_eq!(a.spend(400), Ok(()));
    assert_eq!(a.spend(1), Err(Spent::Share));
    assert_eq!(a.spend(0), Err(Spent::Share), "refused from then on");
    let mut b = RateUse::new(rate.clone(), address(2));
    assert_eq!(b.spend(400), Ok(()));
    let mut c = RateUse::new(rate.clone(), address(3));
    assert_eq!(c.spend(201), Err(Spent::Cap));
    let mut c = RateUse::new(rate.clone(), address(3));
    assert_eq!(c.spend(200), Ok(()));
    assert_eq!(rate.figures().refused, [1, 1]);
    assert_eq!(rate.figures().used, 1000);
    tokio::time::advance(Duration::from_millis(125)).await;
    let mut b = RateUse::new(rate.clone(), address(2));
    assert_eq!(b.spend(200), Ok(()), "an eighth of a second refilled 200");
    assert_eq!(b.spend(1), Err(Spent::Share));
}

#[test]
fn the_names_are_the_labels_in_order() {
    assert_eq!(BUDGET_NAMES.len(), Budget::ALL.len());
    for (name, budget) in BUDGET_NAMES.iter().zip(Budget::ALL) {
        assert_eq!(*name, budget.as_str());
    }
    let governor = Governor::with_defaults();
    let figures = governor.figures();
    let defaults = Budgets::default();
    assert_eq!(
        figures[Budget::HeldBodies as usize].cap,
        defaults.held_bodies
    );
    assert_eq!(
        figures[Budget::Conversations as usize].cap,
        100_000 * Conversations::TURN_BYTES
    );
}
