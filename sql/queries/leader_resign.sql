DELETE FROM distlock.leader_state WHERE group_name = $1 AND leader = $2 RETURNING expires_at > $3
