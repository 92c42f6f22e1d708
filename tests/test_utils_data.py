"""minigrad.utils.data: TensorDataset and DataLoader behave as torch's (batches, shuffling, drop_last, seeding)."""
import numpy as np
import pytest

import minigrad as mg
from minigrad.utils.data import DataLoader, TensorDataset


def _data(n=10):
    return TensorDataset(mg.tensor(np.arange(n * 2, dtype=np.float32).reshape(n, 2)), np.arange(n))


def test_tensor_dataset_items_and_length():
    ds = _data()
    assert len(ds) == 10
    x, y = ds[3]
    assert x.numpy().tolist() == [6.0, 7.0] and int(y.item()) == 3 and x.dtype == np.float32


def test_in_order_batches_cover_every_item_once_and_keep_pairs():
    xs, ys = zip(*DataLoader(_data(), batch_size=4))
    assert [len(y) for y in ys] == [4, 4, 2]
    assert np.concatenate([y.numpy() for y in ys]).tolist() == list(range(10))
    for x, y in zip(xs, ys):
        np.testing.assert_array_equal(x.numpy()[:, 0], 2 * y.numpy())


@pytest.mark.parametrize("n,b,drop,want", [(10, 4, False, [4, 4, 2]), (10, 4, True, [4, 4]), (8, 4, True, [4, 4]),
                                          (3, 5, False, [3]), (3, 5, True, [])])
def test_len_and_drop_last(n, b, drop, want):
    dl = DataLoader(_data(n), batch_size=b, drop_last=drop)
    assert [len(y) for _, y in dl] == want and len(dl) == len(want)


def test_shuffle_is_a_permutation_each_epoch_different_and_seeded():
    dl = DataLoader(_data(50), batch_size=8, shuffle=True, generator=0)
    e1 = np.concatenate([y.numpy() for _, y in dl])
    e2 = np.concatenate([y.numpy() for _, y in dl])
    assert sorted(e1.tolist()) == list(range(50)) and sorted(e2.tolist()) == list(range(50))
    assert e1.tolist() != e2.tolist() and e1.tolist() != list(range(50))
    again = np.concatenate([y.numpy() for _, y in DataLoader(_data(50), batch_size=8, shuffle=True, generator=0)])
    assert again.tolist() == e1.tolist()  # the same seed, the same order
    mg.manual_seed(3)
    a = [y.numpy().tolist() for _, y in DataLoader(_data(50), batch_size=8, shuffle=True)]
    mg.manual_seed(3)
    b = [y.numpy().tolist() for _, y in DataLoader(_data(50), batch_size=8, shuffle=True)]
    assert a == b  # no generator: minigrad's own, which manual_seed reseeds


def test_any_indexable_dataset_is_stacked():
    class Squares:
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return np.array([i, i * i], np.float32), i

    batches = list(DataLoader(Squares(), batch_size=2))
    x, y = batches[0]
    assert isinstance(x, mg.Tensor) and x.shape == (2, 2) and y.numpy().tolist() == [0, 1]
    assert batches[-1][0].numpy().tolist() == [[4.0, 16.0]]
    sums = list(DataLoader(Squares(), batch_size=5, collate_fn=lambda items: sum(i for _, i in items)))
    assert sums == [10]


def test_trains_a_model_over_minibatches():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 3)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5], np.float32))[:, None]
    model = mg.nn.Linear(3, 1)
    opt = mg.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True, generator=1)
    for _ in range(30):
        for xb, yb in loader:
            opt.zero_grad()
            loss = ((model(xb) - yb) ** 2).mean()
            loss.backward()
            opt.step()
    assert float(((model(mg.tensor(x)) - mg.tensor(y)) ** 2).mean().item()) < 1e-3


def test_bad_arguments_say_what_came():
    with pytest.raises(ValueError, match="TensorDataset: every tensor needs the same first dim"):
        TensorDataset(np.zeros((3, 2)), np.zeros(4))
    with pytest.raises(ValueError, match="at least one tensor"):
        TensorDataset()
    with pytest.raises(ValueError, match=r"batch_size must be a positive int, got 0"):
        DataLoader(_data(), batch_size=0)
    with pytest.raises(TypeError, match="needs __len__ and __getitem__, got int"):
        DataLoader(5)


def test_the_module_stays_small():
    import minigrad.utils.data as d
    assert len(open(d.__file__).read().splitlines()) < 100
