"""The controller: the metadata log's state machine (topics, configs, broker
registration and liveness, snapshots) and topic changes on the quorum leader
(KRaft's QuorumController). See ``quorum`` for the theory of operation."""
