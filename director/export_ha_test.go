package director

// TokenSweepEvery lets tests shorten the leader's token sweep.
var TokenSweepEvery = &tokenSweepEvery
