//! Tests of the QP attributes and of Modify QP: the libibverbs bit values
//! and ranges of the attribute values, then the transition table and the
//! checks `modify` makes.

mod attr {
    use super::super::*;
    use core::time::Duration;
    use proptest::prelude::*;

    #[test]
    fn mask_bits_are_the_libibverbs_ones() {
        // enum ibv_qp_attr_mask, as in <infiniband/verbs.h>.
        let expect: [(AttrMask, u32); 20] = [
            (AttrMask::STATE, 1),
            (AttrMask::CUR_STATE, 2),
            (AttrMask::EN_SQD_ASYNC_NOTIFY, 4),
            (AttrMask::ACCESS_FLAGS, 8),
            (AttrMask::PKEY_INDEX, 16),
            (AttrMask::PORT, 32),
            (AttrMask::QKEY, 64),
            (AttrMask::AV, 128),
            (AttrMask::PATH_MTU, 256),
            (AttrMask::TIMEOUT, 512),
            (AttrMask::RETRY_CNT, 1024),
            (AttrMask::RNR_RETRY, 2048),
            (AttrMask::RQ_PSN, 4096),
            (AttrMask::MAX_QP_RD_ATOMIC, 8192),
            (AttrMask::ALT_PATH, 16384),
            (AttrMask::MIN_RNR_TIMER, 32768),
            (AttrMask::SQ_PSN, 65536),
            (AttrMask::MAX_DEST_RD_ATOMIC, 131072),
            (AttrMask::PATH_MIG_STATE, 262144),
            (AttrMask::DEST_QPN, 1048576),
        ];
        for (i, (m, bits)) in expect.into_iter().enumerate() {
            assert_eq!(m.bits(), bits, "{m}");
            assert_eq!(AttrMask::from(Attr::ALL[i]), m);
        }
        assert_eq!(AttrMask::all().len(), 20);
        // IBV_QP_CAP and IBV_QP_RATE_LIMIT are not modelled.
        assert_eq!(AttrMask::from_bits(1 << 19), None);
        assert_eq!(AttrMask::from_bits(1 << 25), None);
        assert_eq!(
            AttrMask::from_bits(0x31),
            Some(AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT)
        );
    }

    #[test]
    fn mask_set_operations_and_display() {
        let m = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT;
        assert_eq!(m.to_string(), "STATE | PKEY_INDEX | PORT");
        assert_eq!(format!("{:?}", AttrMask::empty()), "AttrMask((none))");
        assert!(m.contains(AttrMask::PORT | AttrMask::STATE));
        assert!(!m.contains(AttrMask::QKEY));
        assert_eq!(
            m.difference(AttrMask::STATE),
            AttrMask::PKEY_INDEX | AttrMask::PORT
        );
        assert_eq!(m & AttrMask::PORT, AttrMask::PORT);
        assert_eq!(
            m.without(Attr::Port).with(Attr::Qkey).first(),
            Some(Attr::State)
        );
        assert_eq!(
            m.iter().collect::<Vec<_>>(),
            [Attr::State, Attr::PkeyIndex, Attr::Port]
        );
        let mut n = AttrMask::empty();
        n |= AttrMask::AV;
        assert_eq!(n.len(), 1);
        assert_eq!(n.first(), Some(Attr::Av));
        assert_eq!(AttrMask::empty().first(), None);
    }

    #[test]
    fn access_flags() {
        assert_eq!(
            AccessFlags::from_bits(0xe),
            Some(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC)
        );
        assert_eq!(AccessFlags::from_bits(0x10), None); // IBV_ACCESS_MW_BIND
        assert_eq!(AccessFlags::from_bits_truncate(0x17).bits(), 0x7);
        assert_eq!(
            AccessFlags::all().to_string(),
            "LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC"
        );
        assert_eq!(AccessFlags::empty().to_string(), "(none)");
        assert!(AccessFlags::all().contains(AccessFlags::REMOTE_READ));
        assert!(!AccessFlags::REMOTE_WRITE.contains(AccessFlags::REMOTE_READ));
        assert!(AccessFlags::default().is_empty());
    }

    #[test]
    fn enum_conversions_round_trip() {
        for s in QpState::ALL {
            assert_eq!(QpState::from_ibv(s.as_ibv()), Some(s));
        }
        assert_eq!(QpState::from_ibv(7), None);
        for m in PathMtu::ALL {
            assert_eq!(PathMtu::from_ibv(m.as_ibv()), Some(m));
            assert_eq!(PathMtu::from_bytes(m.bytes()), Some(m));
        }
        assert_eq!(PathMtu::from_ibv(0), None);
        assert_eq!(PathMtu::from_ibv(6), None);
        assert_eq!(PathMtu::from_bytes(1500), None);
        assert_eq!(PathMtu::Mtu1024.to_string(), "1024");
        for v in 0..3 {
            assert_eq!(MigState::from_ibv(v).unwrap().as_ibv(), v);
        }
        assert_eq!(MigState::from_ibv(3), None);
        assert_eq!(QpType::Gsi.to_string(), "GSI");
        assert!(QpType::Gsi.is_datagram() && QpType::Ud.is_datagram());
        assert!(!QpType::Rc.is_datagram() && !QpType::Uc.is_datagram());
    }

    #[test]
    fn qkeys() {
        assert!(qkey_is_controlled(GSI_QKEY));
        assert!(!qkey_is_controlled(0x1111_1111));
    }

    #[test]
    fn attr_mask_follows_set_fields() {
        let a = QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qkey: Some(0x1111_1111),
            ..QpAttr::default()
        };
        assert_eq!(
            a.mask(),
            AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::QKEY
        );
        assert_eq!(QpAttr::default().mask(), AttrMask::empty());
    }

    #[test]
    fn ack_timeout_values() {
        assert_eq!(local_ack_timeout(0), None);
        assert_eq!(local_ack_timeout(1), Some(Duration::from_nanos(8192)));
        // ibv_rc_pingpong's timeout 14: 4.096 us * 16384.
        assert_eq!(
            local_ack_timeout(14),
            Some(Duration::from_nanos(67_108_864))
        );
        assert_eq!(
            local_ack_timeout(31),
            Some(Duration::from_nanos(4096u64 << 31))
        );
        assert_eq!(local_ack_timeout(31).unwrap().as_secs(), 8796);
        assert_eq!(local_ack_timeout(32 + 14), local_ack_timeout(14));
    }

    #[test]
    fn rnr_timer_values() {
        assert_eq!(rnr_timer(0), Duration::from_micros(655_360));
        assert_eq!(rnr_timer(1), Duration::from_micros(10));
        // ibv_rc_pingpong's min_rnr_timer 12.
        assert_eq!(rnr_timer(12), Duration::from_micros(640));
        assert_eq!(rnr_timer(31), Duration::from_micros(491_520));
    }

    proptest! {
        #[test]
        fn ack_timeout_doubles(code in 1u8..31) {
            let t = local_ack_timeout(code).unwrap();
            prop_assert_eq!(local_ack_timeout(code + 1).unwrap(), t * 2);
            prop_assert_eq!(t.as_nanos(), 4096u128 << code);
        }

        #[test]
        fn mask_from_bits_round_trips(bits in any::<u32>()) {
            match AttrMask::from_bits(bits) {
                Some(m) => {
                    prop_assert_eq!(m.bits(), bits);
                    let rebuilt = m.iter().fold(AttrMask::empty(), AttrMask::with);
                    prop_assert_eq!(rebuilt, m);
                }
                None => prop_assert!(bits & !AttrMask::all().bits() != 0),
            }
        }
    }
}

mod modify {
    use super::super::*;
    use crate::transport::psn::Psn;
    use core::time::Duration;
    use proptest::prelude::*;
    use QpState::*;
    use QpType::*;

    type M = AttrMask;

    /// The table again, transcribed separately from the same source, so that
    /// a slip in one of the two copies shows: (type, from, to, required,
    /// optional). Transitions to RESET and ERR are added below for every
    /// (type, from) with nothing required or optional.
    fn expected_rows() -> Vec<(QpType, QpState, QpState, AttrMask, AttrMask)> {
        let none = M::empty();
        let mut rows = Vec::new();
        for ty in QpType::ALL {
            let (r2i, i2i) = match ty {
                Rc | Uc => (
                    M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
                    M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
                ),
                Ud => (
                    M::PKEY_INDEX | M::PORT | M::QKEY,
                    M::PKEY_INDEX | M::PORT | M::QKEY,
                ),
                Gsi => (M::PKEY_INDEX | M::QKEY, M::PKEY_INDEX | M::QKEY),
            };
            rows.push((ty, Reset, Init, r2i, none));
            rows.push((ty, Init, Init, none, i2i));
        }
        // INIT -> RTR
        rows.push((
            Rc,
            Init,
            Rtr,
            M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER,
            M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX,
        ));
        rows.push((
            Uc,
            Init,
            Rtr,
            M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN,
            M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX,
        ));
        rows.push((Ud, Init, Rtr, none, M::PKEY_INDEX | M::QKEY));
        rows.push((Gsi, Init, Rtr, none, M::PKEY_INDEX | M::QKEY));
        // RTR -> RTS
        rows.push((
            Rc,
            Rtr,
            Rts,
            M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC,
            M::CUR_STATE | M::ALT_PATH | M::ACCESS_FLAGS | M::MIN_RNR_TIMER | M::PATH_MIG_STATE,
        ));
        rows.push((
            Uc,
            Rtr,
            Rts,
            M::SQ_PSN,
            M::CUR_STATE | M::ALT_PATH | M::ACCESS_FLAGS | M::PATH_MIG_STATE,
        ));
        rows.push((Ud, Rtr, Rts, M::SQ_PSN, M::CUR_STATE | M::QKEY));
        rows.push((Gsi, Rtr, Rts, M::SQ_PSN, M::CUR_STATE | M::QKEY));
        // RTS -> RTS and SQD -> RTS
        for from in [Rts, Sqd] {
            rows.push((
                Rc,
                from,
                Rts,
                none,
                M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE | M::MIN_RNR_TIMER,
            ));
            rows.push((
                Uc,
                from,
                Rts,
                none,
                M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE,
            ));
            rows.push((Ud, from, Rts, none, M::CUR_STATE | M::QKEY));
            rows.push((Gsi, from, Rts, none, M::CUR_STATE | M::QKEY));
        }
        // RTS -> SQD
        for ty in QpType::ALL {
            rows.push((ty, Rts, Sqd, none, M::EN_SQD_ASYNC_NOTIFY));
        }
        // SQD -> SQD
        rows.push((
            Rc,
            Sqd,
            Sqd,
            none,
            M::PORT
                | M::AV
                | M::TIMEOUT
                | M::RETRY_CNT
                | M::RNR_RETRY
                | M::MAX_QP_RD_ATOMIC
                | M::MAX_DEST_RD_ATOMIC
                | M::ALT_PATH
                | M::ACCESS_FLAGS
                | M::PKEY_INDEX
                | M::MIN_RNR_TIMER
                | M::PATH_MIG_STATE,
        ));
        rows.push((
            Uc,
            Sqd,
            Sqd,
            none,
            M::AV | M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX | M::PATH_MIG_STATE,
        ));
        rows.push((Ud, Sqd, Sqd, none, M::PKEY_INDEX | M::QKEY));
        rows.push((Gsi, Sqd, Sqd, none, M::PKEY_INDEX | M::QKEY));
        // SQE -> RTS (not RC)
        rows.push((Uc, Sqe, Rts, none, M::CUR_STATE | M::ACCESS_FLAGS));
        rows.push((Ud, Sqe, Rts, none, M::CUR_STATE | M::QKEY));
        rows.push((Gsi, Sqe, Rts, none, M::CUR_STATE | M::QKEY));
        // Any state -> RESET, ERR
        for ty in QpType::ALL {
            for from in QpState::ALL {
                rows.push((ty, from, Reset, none, none));
                rows.push((ty, from, Error, none, none));
            }
        }
        rows
    }

    fn expected(ty: QpType, from: QpState, to: QpState) -> Option<Transition> {
        let rows = expected_rows();
        let mut hits = rows
            .iter()
            .filter(|r| r.0 == ty && r.1 == from && r.2 == to);
        let hit = hits.next().map(|r| Transition {
            required: r.3,
            optional: r.4,
        });
        assert!(hits.next().is_none(), "duplicate row {ty} {from}->{to}");
        hit
    }

    fn av(last: u8) -> AddressVector {
        let dgid = crate::wire::Gid::from(std::net::Ipv4Addr::new(192, 168, 0, last));
        AddressVector {
            dgid,
            sgid_index: 1,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            sl: 0,
            src_port: None,
        }
    }

    /// Every field set to a valid value for `ty`, claiming state `cur`.
    fn full_attr(ty: QpType, to: QpState, cur: QpState) -> QpAttr {
        QpAttr {
            qp_state: Some(to),
            cur_qp_state: Some(cur),
            en_sqd_async_notify: Some(true),
            access_flags: Some(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ),
            pkey_index: Some(0),
            port_num: Some(1),
            qkey: Some(if ty == Gsi { GSI_QKEY } else { 0x1111_1111 }),
            av: Some(av(2)),
            path_mtu: Some(PathMtu::Mtu1024),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            rq_psn: Some(Psn::new(0x2f6a4c)),
            max_rd_atomic: Some(1),
            alt_path: Some(AltPath {
                av: av(3),
                pkey_index: 0,
                port_num: 1,
                timeout: 14,
            }),
            min_rnr_timer: Some(12),
            sq_psn: Some(Psn::new(0x123456)),
            max_dest_rd_atomic: Some(1),
            path_mig_state: Some(MigState::Migrated),
            dest_qpn: Some(0x11),
        }
    }

    fn step(cfg: &QpConfig, to: QpState) -> QpConfig {
        let rule = transition(cfg.qp_type(), cfg.state(), to).unwrap();
        let attr = full_attr(cfg.qp_type(), to, cfg.state());
        modify(cfg, &attr, rule.required | M::STATE).unwrap()
    }

    fn fresh(ty: QpType) -> QpConfig {
        match ty {
            Gsi => QpConfig::new_gsi(1, QpCaps::default()).unwrap(),
            _ => QpConfig::new(ty, QpCaps::default()),
        }
    }

    /// A QP of type `ty` brought into `state` the way a real one gets there.
    /// An RC QP never reaches SQE, so that one is forced.
    fn config_in(ty: QpType, state: QpState) -> QpConfig {
        let c = fresh(ty);
        let rts = || step(&step(&step(&c, Init), Rtr), Rts);
        match state {
            Reset => c,
            Init => step(&c, Init),
            Rtr => step(&step(&c, Init), Rtr),
            Rts => rts(),
            Sqd => step(&rts(), Sqd),
            Sqe if ty == Rc => QpConfig::forced(Rc, Sqe),
            Sqe => {
                let mut q = rts();
                assert_eq!(q.enter_send_queue_error(), Sqe);
                q
            }
            Error => step(&rts(), Error),
        }
    }

    #[test]
    fn table_matches_transcription_for_every_pair() {
        let mut legal = 0;
        for ty in QpType::ALL {
            for from in QpState::ALL {
                for to in QpState::ALL {
                    let want = expected(ty, from, to);
                    assert_eq!(transition(ty, from, to), want, "{ty} {from}->{to}");
                    legal += usize::from(want.is_some());
                }
            }
        }
        // 23 transitions per type, less SQE->RTS for RC.
        assert_eq!(legal, 4 * 23 - 1);
    }

    /// Every (type, from, to): illegal ones fail whatever the mask, legal
    /// ones succeed with exactly the required set, fail for each required
    /// attribute left out and for each attribute not accepted, and succeed
    /// with each optional one added.
    #[test]
    fn every_pair_of_states_for_every_type() {
        let mut checked = 0;
        for ty in QpType::ALL {
            for from in QpState::ALL {
                let cfg = config_in(ty, from);
                assert_eq!(cfg.state(), from);
                for to in QpState::ALL {
                    checked += 1;
                    let attr = full_attr(ty, to, from);
                    let ctx = format!("{ty} {from}->{to}");
                    let Some(rule) = transition(ty, from, to) else {
                        let want = ModifyError::InvalidTransition {
                            qp_type: ty,
                            from,
                            to,
                        };
                        for mask in [M::STATE, AttrMask::all()] {
                            assert_eq!(modify(&cfg, &attr, mask), Err(want), "{ctx}");
                        }
                        continue;
                    };

                    let base = rule.required | M::STATE;
                    let ok = modify(&cfg, &attr, base).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                    assert_eq!(ok.state(), to, "{ctx}");
                    assert_eq!(ok.qp_type(), ty);

                    for r in rule.required.iter() {
                        assert_eq!(
                            modify(&cfg, &attr, base.without(r)),
                            Err(ModifyError::MissingRequired {
                                qp_type: ty,
                                from,
                                to,
                                missing: r.into(),
                            }),
                            "{ctx} without {r}"
                        );
                    }
                    for a in AttrMask::all().difference(rule.allowed()).iter() {
                        assert_eq!(
                            modify(&cfg, &attr, base.with(a)),
                            Err(ModifyError::NotAllowed {
                                qp_type: ty,
                                from,
                                to,
                                not_allowed: a.into(),
                            }),
                            "{ctx} with {a}"
                        );
                    }
                    for o in rule.optional.iter() {
                        let r = modify(&cfg, &attr, base.with(o));
                        assert_eq!(r.map(|c| c.state()), Ok(to), "{ctx} with {o}");
                    }
                    let all = modify(&cfg, &attr, base | rule.optional).unwrap();
                    assert_eq!(all.state(), to);
                }
            }
        }
        assert_eq!(checked, 4 * 7 * 7);
    }

    #[test]
    fn brief_examples() {
        let r = transition(Rc, Reset, Init).unwrap();
        assert_eq!(r.required, M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS);
        let r = transition(Ud, Reset, Init).unwrap();
        assert_eq!(r.required, M::PKEY_INDEX | M::PORT | M::QKEY);
        let r = transition(Rc, Init, Rtr).unwrap();
        assert_eq!(
            r.required,
            M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER
        );
        let r = transition(Rc, Rtr, Rts).unwrap();
        assert_eq!(
            r.required,
            M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC
        );
        for ty in QpType::ALL {
            for from in QpState::ALL {
                assert_eq!(transition(ty, from, Reset), Some(Transition::NOTHING));
                assert_eq!(transition(ty, from, Error), Some(Transition::NOTHING));
            }
        }
    }

    #[test]
    fn rc_pingpong_sequence() {
        // What ibv_rc_pingpong does, with its values.
        let q = QpConfig::new(Rc, QpCaps::default());
        let init = QpAttr {
            qp_state: Some(Init),
            pkey_index: Some(0),
            port_num: Some(1),
            access_flags: Some(AccessFlags::empty()),
            ..QpAttr::default()
        };
        let q = modify(&q, &init, init.mask()).unwrap();
        let rtr = QpAttr {
            qp_state: Some(Rtr),
            path_mtu: Some(PathMtu::Mtu1024),
            dest_qpn: Some(0x11),
            rq_psn: Some(Psn::new(0x2f6a4c)),
            max_dest_rd_atomic: Some(1),
            min_rnr_timer: Some(12),
            av: Some(av(2)),
            ..QpAttr::default()
        };
        let q = modify(&q, &rtr, rtr.mask()).unwrap();
        let rts = QpAttr {
            qp_state: Some(Rts),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            sq_psn: Some(Psn::new(0x0abcde)),
            max_rd_atomic: Some(1),
            ..QpAttr::default()
        };
        let q = modify(&q, &rts, rts.mask()).unwrap();
        assert_eq!(q.state(), Rts);
        let a = q.attrs();
        assert_eq!(a.path_mtu, Some(PathMtu::Mtu1024));
        assert_eq!(a.rq_psn, Some(Psn::new(0x2f6a4c)));
        assert_eq!(a.sq_psn, Some(Psn::new(0x0abcde)));
        assert_eq!(a.dest_qpn, Some(0x11));
        assert_eq!(a.qp_state, None);
        assert_eq!(q.ack_timeout(), Some(Duration::from_nanos(67_108_864)));
        assert_eq!(q.min_rnr_wait(), Some(Duration::from_micros(640)));
        assert_eq!(q.to_string(), "RC QP in RTS");
    }

    #[test]
    fn ud_pingpong_sequence() {
        let q = QpConfig::new(Ud, QpCaps::default());
        let init = QpAttr {
            qp_state: Some(Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qkey: Some(0x1111_1111),
            ..QpAttr::default()
        };
        let q = modify(&q, &init, init.mask()).unwrap();
        let rtr = QpAttr {
            qp_state: Some(Rtr),
            ..QpAttr::default()
        };
        let q = modify(&q, &rtr, rtr.mask()).unwrap();
        let rts = QpAttr {
            qp_state: Some(Rts),
            sq_psn: Some(Psn::new(7)),
            ..QpAttr::default()
        };
        let q = modify(&q, &rts, rts.mask()).unwrap();
        assert_eq!(q.state(), Rts);
        assert_eq!(q.attrs().qkey, Some(0x1111_1111));
        assert_eq!(q.ack_timeout(), None);
    }

    #[test]
    fn gsi_takes_only_the_well_known_qkey() {
        let q = QpConfig::new_gsi(1, QpCaps::default()).unwrap();
        assert_eq!(q.attrs().port_num, Some(1));
        let mut a = QpAttr {
            qp_state: Some(Init),
            pkey_index: Some(0),
            qkey: Some(0x1111_1111),
            ..QpAttr::default()
        };
        let e = modify(&q, &a, a.mask()).unwrap_err();
        assert_eq!(e, ModifyError::GsiQkey { qkey: 0x1111_1111 });
        assert_eq!(
            e.to_string(),
            "a GSI QP's Q_Key is 0x80010000, not 0x11111111"
        );
        a.qkey = Some(GSI_QKEY);
        assert_eq!(modify(&q, &a, a.mask()).unwrap().state(), Init);
        // The port is not an attribute of GSI's RESET->INIT.
        a.port_num = Some(1);
        assert_eq!(
            modify(&q, &a, a.mask()).unwrap_err().reason(),
            "not_allowed"
        );
        assert_eq!(
            QpConfig::new_gsi(2, QpCaps::default()),
            Err(ModifyError::OutOfRange {
                attr: Attr::Port,
                field: "port_num",
                value: 2,
                min: 1,
                max: 1
            })
        );
    }

    #[test]
    fn without_state_the_qp_stays() {
        let q = config_in(Rc, Rts);
        let a = QpAttr {
            min_rnr_timer: Some(20),
            ..QpAttr::default()
        };
        let q2 = modify(&q, &a, a.mask()).unwrap();
        assert_eq!(q2.state(), Rts);
        assert_eq!(q2.attrs().min_rnr_timer, Some(20));
        // RTR has no transition to itself.
        let r = config_in(Rc, Rtr);
        assert_eq!(
            modify(&r, &a, a.mask()),
            Err(ModifyError::InvalidTransition {
                qp_type: Rc,
                from: Rtr,
                to: Rtr
            })
        );
        // RESET to itself with nothing: fine, and nothing changes.
        let z = config_in(Uc, Reset);
        assert_eq!(modify(&z, &QpAttr::default(), M::empty()), Ok(z.clone()));
    }

    #[test]
    fn masked_fields_need_values_and_unmasked_ones_are_ignored() {
        let q = config_in(Rc, Reset);
        let a = QpAttr {
            qp_state: Some(Init),
            port_num: Some(1),
            access_flags: Some(AccessFlags::empty()),
            ..QpAttr::default()
        };
        assert_eq!(
            modify(&q, &a, a.mask() | M::PKEY_INDEX),
            Err(ModifyError::NoValue {
                attr: Attr::PkeyIndex
            })
        );
        assert_eq!(
            modify(&q, &QpAttr::default(), M::STATE),
            Err(ModifyError::NoValue { attr: Attr::State })
        );
        // A value outside the mask (here an out-of-range timeout) is ignored.
        let b = QpAttr {
            pkey_index: Some(0),
            timeout: Some(200),
            ..a
        };
        let mask = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
        let q2 = modify(&q, &b, mask).unwrap();
        assert_eq!(q2.attrs().timeout, None);
    }

    #[test]
    fn cur_state_must_match() {
        let q = config_in(Ud, Sqe);
        let mut a = QpAttr {
            qp_state: Some(Rts),
            cur_qp_state: Some(Sqe),
            ..QpAttr::default()
        };
        assert_eq!(modify(&q, &a, a.mask()).unwrap().state(), Rts);
        a.cur_qp_state = Some(Rts);
        let e = modify(&q, &a, a.mask()).unwrap_err();
        assert_eq!(
            e,
            ModifyError::CurrentStateMismatch {
                claimed: Rts,
                actual: Sqe
            }
        );
        assert_eq!(e.to_string(), "cur_qp_state says RTS, but the QP is in SQE");
        // CUR_STATE is accepted only on transitions into RTS.
        let r = config_in(Ud, Reset);
        let b = QpAttr {
            cur_qp_state: Some(Reset),
            ..full_attr(Ud, Init, Reset)
        };
        assert_eq!(
            modify(
                &r,
                &b,
                M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY | M::CUR_STATE
            )
            .unwrap_err()
            .reason(),
            "not_allowed"
        );
    }

    #[test]
    fn error_reports_every_missing_attribute() {
        let q = config_in(Rc, Init);
        let a = QpAttr {
            qp_state: Some(Rtr),
            path_mtu: Some(PathMtu::Mtu1024),
            ..QpAttr::default()
        };
        let e = modify(&q, &a, a.mask()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "INIT to RTR on a RC QP requires AV | RQ_PSN | MIN_RNR_TIMER | \
             MAX_DEST_RD_ATOMIC | DEST_QPN"
        );
        let b = QpAttr {
            qkey: Some(5),
            ..full_attr(Rc, Rtr, Init)
        };
        let e = modify(&q, &b, b.mask()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "INIT to RTR on a RC QP does not accept CUR_STATE | EN_SQD_ASYNC_NOTIFY | \
             PORT | QKEY | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC | SQ_PSN | \
             PATH_MIG_STATE"
        );
    }

    /// (type, from, to, the change, attribute, field): each change is one
    /// past the edge of its range.
    #[allow(clippy::type_complexity)]
    fn range_cases() -> Vec<(
        QpType,
        QpState,
        QpState,
        fn(&mut QpAttr),
        Attr,
        &'static str,
    )> {
        vec![
            (
                Rc,
                Reset,
                Init,
                |a| a.pkey_index = Some(1),
                Attr::PkeyIndex,
                "pkey_index",
            ),
            (
                Rc,
                Reset,
                Init,
                |a| a.port_num = Some(0),
                Attr::Port,
                "port_num",
            ),
            (
                Ud,
                Reset,
                Init,
                |a| a.port_num = Some(2),
                Attr::Port,
                "port_num",
            ),
            (
                Rc,
                Init,
                Rtr,
                |a| a.av.as_mut().unwrap().sgid_index = 255,
                Attr::Av,
                "av.sgid_index",
            ),
            (
                Uc,
                Init,
                Rtr,
                |a| a.av.as_mut().unwrap().flow_label = 0x10_0000,
                Attr::Av,
                "av.flow_label",
            ),
            (
                Rc,
                Init,
                Rtr,
                |a| a.av.as_mut().unwrap().sl = 16,
                Attr::Av,
                "av.sl",
            ),
            (
                Rc,
                Init,
                Rtr,
                |a| a.dest_qpn = Some(0x100_0000),
                Attr::DestQpn,
                "dest_qpn",
            ),
            (
                Rc,
                Init,
                Rtr,
                |a| a.min_rnr_timer = Some(32),
                Attr::MinRnrTimer,
                "min_rnr_timer",
            ),
            (
                Rc,
                Init,
                Rtr,
                |a| a.max_dest_rd_atomic = Some(129),
                Attr::MaxDestRdAtomic,
                "max_dest_rd_atomic",
            ),
            (
                Rc,
                Init,
                Rtr,
                |a| a.path_mtu = Some(PathMtu::Mtu4096),
                Attr::PathMtu,
                "path_mtu",
            ),
            (
                Rc,
                Rtr,
                Rts,
                |a| a.timeout = Some(32),
                Attr::Timeout,
                "timeout",
            ),
            (
                Rc,
                Rtr,
                Rts,
                |a| a.retry_cnt = Some(8),
                Attr::RetryCnt,
                "retry_cnt",
            ),
            (
                Rc,
                Rtr,
                Rts,
                |a| a.rnr_retry = Some(8),
                Attr::RnrRetry,
                "rnr_retry",
            ),
            (
                Rc,
                Rtr,
                Rts,
                |a| a.max_rd_atomic = Some(129),
                Attr::MaxRdAtomic,
                "max_rd_atomic",
            ),
            (
                Rc,
                Rts,
                Rts,
                |a| a.min_rnr_timer = Some(255),
                Attr::MinRnrTimer,
                "min_rnr_timer",
            ),
            (
                Rc,
                Sqd,
                Sqd,
                |a| a.timeout = Some(32),
                Attr::Timeout,
                "timeout",
            ),
            (
                Rc,
                Sqd,
                Sqd,
                |a| a.port_num = Some(9),
                Attr::Port,
                "port_num",
            ),
            (
                Rc,
                Init,
                Rtr,
                |a| a.alt_path.as_mut().unwrap().timeout = 32,
                Attr::AltPath,
                "alt_path.timeout",
            ),
            (
                Uc,
                Init,
                Rtr,
                |a| a.alt_path.as_mut().unwrap().port_num = 0,
                Attr::AltPath,
                "alt_path.port_num",
            ),
            (
                Rc,
                Rts,
                Rts,
                |a| a.alt_path.as_mut().unwrap().pkey_index = 3,
                Attr::AltPath,
                "alt_path.pkey_index",
            ),
            (
                Rc,
                Rts,
                Rts,
                |a| a.alt_path.as_mut().unwrap().av.sl = 200,
                Attr::AltPath,
                "alt_path.av.sl",
            ),
        ]
    }

    #[test]
    fn out_of_range_values() {
        // Caps with a smaller path MTU, so that 4096 is out of range.
        let caps = QpCaps {
            max_path_mtu: PathMtu::Mtu2048,
            gid_table_len: 16,
            ..QpCaps::default()
        };
        for (ty, from, to, change, attr, field) in range_cases() {
            let mut cfg = config_in(ty, from);
            cfg.caps = caps;
            let rule = transition(ty, from, to).unwrap();
            let good = full_attr(ty, to, from);
            let mask = rule.required | M::STATE | attr.into();
            assert!(
                modify(&cfg, &good, mask).is_ok(),
                "{ty} {from}->{to} {field}"
            );
            let mut bad = good;
            change(&mut bad);
            let before = cfg.clone();
            match modify(&cfg, &bad, mask) {
                Err(ModifyError::OutOfRange {
                    attr: a, field: f, ..
                }) => {
                    assert_eq!((a, f), (attr, field), "{ty} {from}->{to}");
                }
                other => panic!("{ty} {from}->{to} {field}: {other:?}"),
            }
            assert_eq!(cfg, before);
        }
    }

    #[test]
    fn range_edges_are_inclusive() {
        let cfg = config_in(Rc, Rtr);
        let rule = transition(Rc, Rtr, Rts).unwrap();
        let a = QpAttr {
            timeout: Some(31),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(128),
            ..full_attr(Rc, Rts, Rtr)
        };
        assert!(modify(&cfg, &a, rule.required | M::STATE).is_ok());
        let b = QpAttr {
            timeout: Some(0),
            retry_cnt: Some(0),
            rnr_retry: Some(0),
            max_rd_atomic: Some(0),
            ..a
        };
        let q = modify(&cfg, &b, rule.required | M::STATE).unwrap();
        assert_eq!(q.ack_timeout(), None);

        let e = modify(
            &cfg,
            &QpAttr {
                timeout: Some(32),
                ..a
            },
            rule.required | M::STATE,
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "TIMEOUT: timeout = 32 is outside 0..=31");
        assert_eq!(e.reason(), "out_of_range");

        let init = config_in(Rc, Init);
        let r = transition(Rc, Init, Rtr).unwrap();
        let c = QpAttr {
            dest_qpn: Some(MAX_QPN),
            min_rnr_timer: Some(31),
            ..full_attr(Rc, Rtr, Init)
        };
        for mtu in PathMtu::ALL {
            let d = QpAttr {
                path_mtu: Some(mtu),
                ..c
            };
            assert!(modify(&init, &d, r.required | M::STATE).is_ok(), "{mtu}");
        }
    }

    #[test]
    fn reset_clears_attributes_and_error_keeps_them() {
        let q = config_in(Rc, Rts);
        assert!(q.attrs().path_mtu.is_some());
        let to_err = modify(&q, &full_attr(Rc, Error, Rts), M::STATE).unwrap();
        assert_eq!(to_err.state(), Error);
        assert_eq!(to_err.attrs(), q.attrs());
        let reset = modify(&to_err, &full_attr(Rc, Reset, Error), M::STATE).unwrap();
        assert_eq!(reset, QpConfig::new(Rc, QpCaps::default()));

        let g = config_in(Gsi, Rts);
        let g = modify(&g, &full_attr(Gsi, Reset, Rts), M::STATE).unwrap();
        assert_eq!(g, QpConfig::new_gsi(1, QpCaps::default()).unwrap());
        // And back up again from scratch.
        assert_eq!(step(&step(&g, Init), Rtr).state(), Rtr);
    }

    #[test]
    fn errors_leave_the_config_unchanged() {
        let q = config_in(Uc, Init);
        let before = q.clone();
        let mut a = full_attr(Uc, Rtr, Init);
        a.av.as_mut().unwrap().sl = 99;
        let _ = modify(&q, &a, a.mask()).unwrap_err();
        let _ = modify(&q, &a, M::STATE).unwrap_err();
        let _ = modify(
            &q,
            &a,
            M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN,
        )
        .unwrap_err();
        assert_eq!(q, before);
    }

    #[test]
    fn engine_transitions() {
        let mut rc = config_in(Rc, Rts);
        assert_eq!(rc.enter_send_queue_error(), Error);
        let mut uc = config_in(Uc, Sqd);
        assert_eq!(uc.enter_send_queue_error(), Sqe);
        let mut ud = config_in(Ud, Rtr);
        assert_eq!(ud.enter_send_queue_error(), Rtr);
        ud.enter_error();
        assert_eq!(ud.state(), Error);
        assert!(ud.attrs().qkey.is_some());
        // From SQE a UD QP resumes.
        let sqe = config_in(Ud, Sqe);
        let back = modify(&sqe, &full_attr(Ud, Rts, Sqe), M::STATE).unwrap();
        assert_eq!(back.state(), Rts);
    }

    #[test]
    fn sqd_notification_is_stored() {
        let q = config_in(Rc, Rts);
        let a = QpAttr {
            qp_state: Some(Sqd),
            en_sqd_async_notify: Some(true),
            ..QpAttr::default()
        };
        let d = modify(&q, &a, a.mask()).unwrap();
        assert_eq!(d.state(), Sqd);
        assert_eq!(d.attrs().en_sqd_async_notify, Some(true));
    }

    #[test]
    fn error_messages() {
        let e = ModifyError::InvalidTransition {
            qp_type: Rc,
            from: Sqe,
            to: Rts,
        };
        assert_eq!(e.to_string(), "a RC QP cannot go from SQE to RTS");
        assert_eq!(
            ModifyError::NoValue { attr: Attr::Qkey }.to_string(),
            "the attribute mask has QKEY but no value is given for it"
        );
    }

    fn qp_type() -> impl Strategy<Value = QpType> {
        prop::sample::select(QpType::ALL.to_vec())
    }
    fn qp_state() -> impl Strategy<Value = QpState> {
        prop::sample::select(QpState::ALL.to_vec())
    }

    proptest! {
        /// With valid values, `modify` succeeds exactly when the mask fits
        /// the table, and then changes the masked fields and nothing else.
        #[test]
        fn outcome_follows_the_table(
            ty in qp_type(),
            from in qp_state(),
            to in qp_state(),
            bits in any::<u32>(),
        ) {
            let cfg = config_in(ty, from);
            let mask = AttrMask::from_bits(bits & AttrMask::all().bits()).unwrap();
            let attr = full_attr(ty, to, from);
            let target = if mask.has(Attr::State) { to } else { from };
            let result = modify(&cfg, &attr, mask);
            match transition(ty, from, target) {
                None => prop_assert_eq!(
                    result,
                    Err(ModifyError::InvalidTransition { qp_type: ty, from, to: target })
                ),
                Some(rule) => {
                    let fits = mask.contains(rule.required)
                        && rule.allowed().contains(mask);
                    prop_assert_eq!(result.is_ok(), fits, "{:?}", result);
                    if let Ok(next) = result {
                        prop_assert_eq!(next.state(), target);
                        if target != Reset {
                            for a in Attr::ALL {
                                if a == Attr::State || a == Attr::CurState {
                                    continue;
                                }
                                let mut want = *cfg.attrs();
                                if mask.has(a) {
                                    want.copy_field(&attr, a);
                                }
                                let mut got = *cfg.attrs();
                                got.copy_field(next.attrs(), a);
                                prop_assert_eq!(got, want, "{}", a);
                            }
                        }
                    }
                }
            }
        }
    }

    /// `qp::migration`: the MigReq bit follows the state, and MIGRATED
    /// asked for while ARMED moves every field of the alternate path in.
    #[test]
    fn migration_on_request_moves_the_whole_alternate_path() {
        let rts = config_in(Rc, Rts);
        assert_eq!(rts.mig_state(), MigState::Migrated);
        assert!(rts.mig_req());
        let alt = AltPath {
            av: av(9),
            pkey_index: 1,
            port_num: 1,
            timeout: 20,
        };
        let arm = QpAttr {
            alt_path: Some(alt),
            path_mig_state: Some(MigState::Armed),
            ..Default::default()
        };
        let mut rts = rts;
        rts.caps.pkey_table_len = 2;
        let armed = modify(&rts, &arm, M::ALT_PATH | M::PATH_MIG_STATE).unwrap();
        assert_eq!(armed.armed_path(), Some(&alt));
        assert!(!armed.mig_req());
        // Loading a new alternate while ARMED stays ARMED.
        let reload = QpAttr {
            alt_path: Some(alt),
            ..Default::default()
        };
        assert_eq!(
            modify(&armed, &reload, M::ALT_PATH).unwrap().mig_state(),
            MigState::Armed
        );
        let go = QpAttr {
            path_mig_state: Some(MigState::Migrated),
            ..Default::default()
        };
        let moved = modify(&armed, &go, M::PATH_MIG_STATE).unwrap();
        let a = moved.attrs();
        assert_eq!(
            (a.av, a.pkey_index, a.port_num, a.timeout, a.alt_path),
            (Some(av(9)), Some(1), Some(1), Some(20), None)
        );
        assert_eq!(moved.mig_state(), MigState::Migrated);
        assert!(moved.mig_req());
        // MIGRATED again is nothing to do; REARM now needs a new path.
        assert_eq!(modify(&moved, &go, M::PATH_MIG_STATE).unwrap(), moved);
        let rearm = QpAttr {
            path_mig_state: Some(MigState::Rearm),
            ..Default::default()
        };
        assert_eq!(
            modify(&moved, &rearm, M::PATH_MIG_STATE),
            Err(ModifyError::NoAlternatePath)
        );
        assert_eq!(
            modify(&armed, &rearm, M::PATH_MIG_STATE),
            Err(ModifyError::MigStateChange {
                from: MigState::Armed,
                to: MigState::Rearm
            })
        );
    }
}
