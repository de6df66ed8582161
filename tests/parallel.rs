use vram_planner::estimator::config::Plan;
use vram_planner::estimator::parallel::*;

#[test]
fn smoke() {
    for zero in 0..4u8 {
        let mut p = Plan::new("resnet50");
        p.batch = 32;
        p.gpu = Some("a100-80".into());
        p.parallel = Some(Parallel { gpus_per_node: Some(8), zero: Some(zero), ..Default::default() });
        let e = estimate_parallel(&p).unwrap();
        println!("zero {zero}: {:?} step {:?} eff {:?} comm {} {}", e.per_gpu, e.step_seconds, e.scaling_efficiency, e.comm_bytes_per_step, e.comm_seconds_per_step);
    }
    let mut p = Plan::new("resnet50");
    p.batch = 32;
    p.gpu = Some("a100-80".into());
    let e = vram_planner::estimator::estimate(&p).unwrap();
    println!("single {:?}", single_gpu(&e));
    p.parallel = Some(Parallel { gpus_per_node: Some(4), pp: 4, micro_batches: Some(8), ..Default::default() });
    let e = estimate_parallel(&p).unwrap();
    for r in &e.ranks { println!("stage {} {:?} inflight {} peak {:?} {:?}", r.stage, r.chunks, r.micro_batches_in_flight, r.memory.peak_allocated_bytes, r.peak_op); }
}
