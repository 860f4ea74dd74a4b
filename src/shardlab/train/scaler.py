"""Dynamic loss scaling for fp16 (what torch.amp.GradScaler does, made strategy-agnostic).

The overflow decision comes from `strategy.unscale_and_check`, which agrees across ranks, so an
overflow step is skipped on every rank or on none, and the scale stays identical everywhere.
"""


class LossScaler:
    def __init__(self, init_scale: float = 2.0 ** 16, growth_interval: int = 2000):
        self.scale = init_scale
        self.growth_interval = growth_interval
        self.good_steps = 0
        self.skipped = 0

    def update(self, found_inf: bool) -> None:
        if found_inf:
            self.scale /= 2.0
            self.good_steps = 0
            self.skipped += 1
        else:
            self.good_steps += 1
            if self.good_steps % self.growth_interval == 0:
                self.scale *= 2.0

    def state_dict(self) -> dict:
        return {"scale": self.scale, "good_steps": self.good_steps, "skipped": self.skipped}

    def load_state_dict(self, sd: dict) -> None:
        self.scale, self.good_steps, self.skipped = sd["scale"], sd["good_steps"], sd["skipped"]
