"""Train an embedding model with BGAugment in a plain PyTorch loop, then measure its background bias.

    python examples/train_with_bgaugment.py --root data/bench --masks masks/bench --backgrounds backgrounds

Any dataset layout bgbias reads works (--dataset cub --root DIR), once `bgbias masks` has made its masks.
"""

import argparse

import torch
import torchvision
from pytorch_metric_learning import losses, samplers

import bgbias

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--dataset", default="bench")
parser.add_argument("--root", default=None, help="dataset folder (default: its usual place under ./data)")
parser.add_argument("--masks", default=None, help="its saliency masks (default masks/<dataset>)")
parser.add_argument("--backgrounds", default="backgrounds", help="a folder with the train/ pool")
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--workers", type=int, default=2)
parser.add_argument("--repeats", type=int, default=5, help="corrupted repeats to score")
parser.add_argument("--out", default=None, help="report folder (default runs/external/<name>-<digests>)")
args = parser.parse_args()

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
images = bgbias.MaskedImages(args.dataset, args.root, masks=args.masks)  # (uint8 image, mask, label)
sampler = samplers.MPerClassSampler(images.labels, m=4, batch_size=args.batch,
                                    length_before_new_iter=len(images))  # 4 images of each class per batch
loader = torch.utils.data.DataLoader(images, batch_size=args.batch, sampler=sampler, num_workers=args.workers)
bgaugment = bgbias.BGAugment(args.backgrounds, p=1.0, seed=0).to(device)  # random backgrounds, on `device`
model_input = bgbias.ModelInput(normalize="imagenet")  # how the model is fed, in training and when scored

model = torchvision.models.mobilenet_v2(num_classes=128).to(device)  # its last layer: a 128-d embedding
loss_fn = losses.MultiSimilarityLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
for epoch in range(args.epochs):
    model.train()
    for pixels, masks, labels in loader:
        composited = bgaugment(pixels.to(device), masks.to(device))  # float RGB in [0, 1]
        loss = loss_fn(model(model_input.normalize_batch(composited)), labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch + 1}: loss {loss.item():.4f}")

# Clean vs corrupted MAP@R on the test split, with the corrupted sets every bgbias run is scored on.
result = bgbias.evaluate(model.eval(), args.dataset, root=args.root, masks=args.masks,
                         backgrounds=args.backgrounds, repeats=args.repeats, model_input=model_input,
                         out=args.out, workers=args.workers)
print(result.summary())
