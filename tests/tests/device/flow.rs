//! Flow steering and counters on the soft devices: neither has them; each
//! refusal (flows, counters, ESP actions) is the typed "not supported"
//! error, and the QP still works.

use std::net::Ipv4Addr;

use rdma::{
    AesGcmKey, CompletionQueue, Counters, EspAttr, EspDirection, EspMode, EthFilter, Flow,
    FlowActionEsp, FlowSpec, Ipv4Filter, PortFilter, ProtectionDomain, QpType, QueuePair,
};
use rdma_tests::{Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::{open, refused};
use crate::unsupported::{no_leak, not_supported, said};

pub fn flows_and_counters_are_not_supported(env: &TestEnv) -> TestResult {
    let (flow, counters, action) = no_leak(env, || {
        let ctx = open(env)?;
        let pd = ProtectionDomain::new(&ctx)?;
        let cq = CompletionQueue::new(&ctx, 16)?;
        // siw has RC QPs only; rxe steers none either way.
        let t = match env.provider {
            Provider::Rxe => QpType::Ud,
            Provider::Siw => QpType::Rc,
        };
        let qp = QueuePair::builder(&pd, t, &cq).build()?;
        let all = |n: u8| [n; 6];
        let r = Flow::builder(1)
            .spec(FlowSpec::Eth {
                val: EthFilter {
                    dst_mac: [2, 0, 0, 0, 0, 1],
                    ether_type: 0x0800,
                    ..Default::default()
                },
                mask: EthFilter {
                    dst_mac: all(0xff),
                    ether_type: 0xffff,
                    ..Default::default()
                },
            })
            .spec(FlowSpec::Ipv4 {
                val: Ipv4Filter {
                    src: Ipv4Addr::UNSPECIFIED,
                    dst: env.ipv4,
                },
                mask: Ipv4Filter {
                    src: Ipv4Addr::UNSPECIFIED,
                    dst: Ipv4Addr::BROADCAST,
                },
            })
            .spec(FlowSpec::Udp {
                val: PortFilter {
                    dst_port: 4791,
                    src_port: 0,
                },
                mask: PortFilter {
                    dst_port: 0xffff,
                    src_port: 0,
                },
            })
            .build(&qp);
        let flow = not_supported(env, r, "ibv_create_flow")?;
        let counters = not_supported(env, Counters::new(&ctx), "ibv_create_counters")?;
        let esp = EspAttr {
            spi: 0x100,
            seq: 0,
            tfc_pad: 0,
            hard_limit_pkts: 0,
            direction: EspDirection::Decrypt,
            mode: EspMode::Tunnel,
            full_offload: false,
            esn: None,
            key: AesGcmKey {
                key: vec![7; 16],
                salt: 1,
                iv: 0,
                icv_len: 16,
            },
            replay_window: None,
        };
        let bad = EspAttr {
            key: AesGcmKey {
                key: vec![7; 20],
                ..esp.key.clone()
            },
            ..esp.clone()
        };
        refused(
            FlowActionEsp::new(&ctx, &bad),
            "ibv_create_flow_action_esp",
            libc::EINVAL,
            "16 or 32 bytes",
        )?;
        let action = not_supported(
            env,
            FlowActionEsp::new(&ctx, &esp),
            "ibv_create_flow_action_esp",
        )?;
        // The QP is unharmed.
        rdma_tests::check!(qp.state()? != rdma::QpState::Error);
        Ok((flow, counters, action))
    })?;
    Ok(Outcome::Skipped(format!(
        "no flow steering, counters or ESP actions: {}, {}, {} (typed errors checked, no kernel object left)",
        said(env, "ibv_create_flow", flow),
        said(env, "ibv_create_counters", counters),
        said(env, "ibv_create_flow_action_esp", action)
    )))
}

rdma_tests::tests!("flow": flows_and_counters_are_not_supported);
